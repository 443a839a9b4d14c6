"""Many records made from a few real ones, as a nightly suite would leave them: each copy has
its own id and seed, starts one minute after the one before, and its times move by a few
per cent (seeded), so repeats of a configuration look like repeated runs.

Used by tests/integration/test_report_scale.py and benchmarks/bench_report_scale.py.
"""
from __future__ import annotations

import json
import random
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from llmdissect.results.schema import RunRecord

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "quick_records.jsonl"
START = datetime(2026, 1, 1, tzinfo=timezone.utc)


def base_records(path: Path = FIXTURE) -> list[dict[str, Any]]:
    """The records of one quick-suite run (stored as JSON lines), oldest first."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return sorted(rows, key=lambda d: d["started_at"])


def _scaled(value: Any, key: str, factor: float) -> Any:
    """Times (`*_s`) times factor, rates (`*per_s`) over it, inside Stats and rows too."""
    if isinstance(value, dict):
        return {k: _scaled(v, k, factor) for k, v in value.items()}
    if isinstance(value, list):
        return [_scaled(v, key, factor) for v in value]
    if isinstance(value, (int, float)) and not isinstance(value, bool) and key not in ("n",):
        if "per_s" in key:
            return value / factor
        if key.endswith("_s") or key in ("median", "mean", "min", "max", "stdev", "p5", "p90", "p95", "p99",
                                         "samples"):
            return value * factor
    return value


def copies(base: list[dict[str, Any]], n: int, *, jitter: float = 0.03, seed: int = 0,
           slower: dict[int, float] | None = None, recent_share: float = 0.25) -> Iterator[RunRecord]:
    """n records cycling through `base`. `slower`: base index -> factor applied to the times of
    that configuration's newest `recent_share` of copies (a regression to find)."""
    rng = random.Random(seed)
    per_base = -(-n // len(base))
    for i in range(n):
        b, rep = i % len(base), i // len(base)
        d = dict(base[b])
        factor = 1 + rng.uniform(-jitter, jitter)
        if slower and b in slower and rep >= per_base * (1 - recent_share):
            factor *= slower[b]
        if d.get("source") == "measured":
            # a Stats dict's times scale as a whole (its "samples" key included): keep the parent key
            d["metrics"] = {k: _scaled(v, k, factor) if isinstance(v, (int, float, list)) else
                            {kk: _scaled(vv, k if kk in ("median", "mean", "min", "max", "stdev", "p5", "p90", "p95",
                                                          "p99", "samples") else kk, factor)
                             for kk, vv in v.items()} if isinstance(v, dict) else v
                            for k, v in d["metrics"].items()}
        d["config"] = {**d["config"], "seed": rep} if "seed" in d["config"] else d["config"]
        d["id"] = f"r{i:07d}{rng.getrandbits(32):08x}"
        d["started_at"] = (START + timedelta(minutes=i)).isoformat(timespec="milliseconds")
        d["finished_at"] = d["started_at"]
        d["suite"] = "nightly"
        yield RunRecord.from_dict(d)
