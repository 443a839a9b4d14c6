"""When requests are sent: Poisson or gamma arrivals at a rate, all at once, or a replayed
schedule. A schedule is a list of send offsets in seconds from the start of the run; every
run stores the offsets it realised (`metrics.send_offsets_s`), so another run can replay them.
"""
from __future__ import annotations

import json
import math
import random
from pathlib import Path

from llmdissect.errors import UserError


def gamma_offsets(n: int, rate: float, burstiness: float = 1.0, seed: int = 0) -> list[float]:
    """Offsets of `n` arrivals whose gaps are gamma(shape=burstiness, scale=1/(rate*burstiness)).

    The mean gap is 1/rate whatever the burstiness; burstiness 1 gives exponential gaps (a
    Poisson process), below 1 burstier, above 1 more regular. The first request goes at 0.
    `rate` inf sends everything at once.
    """
    if n <= 0:
        return []
    if rate <= 0 or math.isnan(rate):
        raise UserError(f"--request-rate must be positive or inf, got {rate}")
    if burstiness <= 0:
        raise UserError(f"--burstiness must be positive, got {burstiness}")
    if math.isinf(rate):
        return [0.0] * n
    rng = random.Random(seed)
    scale = 1.0 / (rate * burstiness)
    offsets, t = [0.0], 0.0
    for _ in range(n - 1):
        t += rng.gammavariate(burstiness, scale)
        offsets.append(t)
    return offsets


def load_offsets(path: Path) -> list[float]:
    """A recorded schedule: a JSON list of offsets, `{"send_offsets_s": [...]}`, or a run
    record (as `results show --json` prints it) whose metrics hold `send_offsets_s`."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise UserError(f"arrivals file not found: {path}") from None
    except (OSError, ValueError) as e:
        raise UserError(f"arrivals file {path} is not JSON: {e}") from None
    if isinstance(data, dict):
        data = data.get("send_offsets_s", (data.get("metrics") or {}).get("send_offsets_s"))
    if not isinstance(data, list) or not data or not all(isinstance(x, (int, float)) for x in data):
        raise UserError(f"arrivals file {path}: expected a non-empty list of send offsets in seconds")
    offsets = sorted(float(x) for x in data)
    if offsets[0] < 0:
        raise UserError(f"arrivals file {path}: offsets must be >= 0")
    start = offsets[0]
    return [x - start for x in offsets]


def realised_rate(offsets: list[float]) -> float | None:
    """Arrivals per second over the schedule: (n - 1) / (last - first send offset)."""
    if len(offsets) < 2:
        return None
    span = max(offsets) - min(offsets)
    return (len(offsets) - 1) / span if span > 0 else math.inf


def parse_rates(text: str) -> list[float]:
    """`1,2,inf` -> [1.0, 2.0, inf]."""
    rates = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            r = float(part)
        except ValueError:
            raise UserError(f"not a request rate: {part!r} (numbers or inf, comma-separated)") from None
        if r <= 0 or math.isnan(r):
            raise UserError(f"request rates must be positive or inf, got {part}")
        rates.append(r)
    if not rates:
        raise UserError("--sweep-rates needs at least one rate")
    return rates
