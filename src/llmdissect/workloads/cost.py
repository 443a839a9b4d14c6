"""Dollars per million tokens from an hourly price: the run's cost charged to its tokens.

run cost (USD) = usd_per_hour * duration_s / 3600. Cost per million input (output, training)
tokens = run cost / those tokens * 1e6: each charges the whole run to one kind of token, as
serving price lists quote them (so input and output costs do not add up to the run's cost).
The price is the user's (`--usd-per-hour`) or the hardware catalogue's `usd_per_hour`
(with its source); none given, no cost is stated.
"""
from __future__ import annotations

from typing import Any

import llmdissect.metric_names as mn
from llmdissect.errors import UserError


def usd_per_million(usd_per_hour: float, duration_s: float, tokens: float) -> float | None:
    """usd_per_hour * duration_s / 3600 / tokens * 1e6; None without tokens or time."""
    if not tokens or duration_s <= 0:
        return None
    return usd_per_hour * duration_s / 3600.0 / tokens * 1e6


def serving_cost(usd_per_hour: float | None, source: str, duration_s: float, input_tokens: float,
                 output_tokens: float) -> dict[str, Any]:
    """The cost metrics of a serving run (docs/metrics.md)."""
    if usd_per_hour is None:
        return {}
    return {mn.USD_PER_MILLION_INPUT_TOKENS: usd_per_million(usd_per_hour, duration_s, input_tokens),
            mn.USD_PER_MILLION_OUTPUT_TOKENS: usd_per_million(usd_per_hour, duration_s, output_tokens),
            "usd_per_hour": usd_per_hour, "usd_per_hour_source": source}


def price_for(hardware: str | None, devices: int, override: float | None) -> tuple[float, str] | None:
    """(USD per hour, where it came from): `--usd-per-hour` when given (the price of everything
    the run used), else the catalogue's per-device price times `devices`; None when neither."""
    if override is not None:
        if not override > 0:
            raise UserError(f"--usd-per-hour must be positive, got {override}")
        return float(override), "--usd-per-hour"
    if not hardware or hardware == "cpu":
        return None
    from llmdissect.specs import get_hardware

    try:
        spec = get_hardware(hardware)
    except UserError:  # a GPU the catalogue does not know: no price
        return None
    if spec.usd_per_hour is None:
        return None
    return spec.usd_per_hour * devices, f"catalogue {spec.name} x {devices}: {spec.usd_per_hour_source}"


def _median(value: Any) -> float | None:
    return value.get("median") if isinstance(value, dict) else value


def per_million_at_rate(usd_per_hour: float, tokens_per_s: float | None) -> float | None:
    """usd_per_hour / 3600 / tokens_per_s * 1e6: the cost of a million tokens at that rate."""
    return usd_per_hour / 3600.0 / tokens_per_s * 1e6 if tokens_per_s else None


def add_cost(record: Any, override: float | None) -> None:
    """Put the cost per million tokens in an ok infer or training record (in place): infer at its
    median prefill (input) and decode (output) rates, training at its tokens_per_s."""
    if record.status != "ok":
        return
    c, m = record.config, record.metrics
    devices = int(c.get("nproc") or 1) * int(c.get("nnodes") or 1)
    price = price_for(c.get("hardware"), devices, override)
    if price is None:
        return
    usd, source = price
    m["usd_per_hour"], m["usd_per_hour_source"] = usd, source
    if record.kind == mn.INFER:
        m[mn.USD_PER_MILLION_INPUT_TOKENS] = per_million_at_rate(usd, _median(m.get(mn.PREFILL_TOKENS_PER_S)))
        m[mn.USD_PER_MILLION_OUTPUT_TOKENS] = per_million_at_rate(usd, _median(m.get(mn.DECODE_TOKENS_PER_S)))
    else:
        m[mn.USD_PER_MILLION_TRAINING_TOKENS] = per_million_at_rate(usd, _median(m.get(mn.TOKENS_PER_S)))
