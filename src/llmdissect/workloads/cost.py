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
