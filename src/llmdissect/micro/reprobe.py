"""The fixed-cost probe again, later: the quieter of two probes sets the machine's fixed costs.

`peak` measures the fixed costs (micro.overhead) in a fraction of a second. On a shared VM a
stretch of a few seconds to minutes can run everything 1.5-2x slower (docs/notes, issue 16:
two of five quick suites in one session stored an `op_fixed_s` of 30-32 us against 16-17 us
in the others, while the points they ran later measured at the usual speed), and every
inference estimate then carries it. Fixed costs are what the machine does at its quickest, so,
as each probe keeps the least of its block medians, the quick suite runs the probe once more
after its measurements and keeps whichever of the two sets has the lower per-operator cost.
"""
from __future__ import annotations

from typing import Any

TARGET = "llmdissect.micro.reprobe:child"

PROBE_KEYS = ("op_fixed_s", "op_fixed_cold_s", "forward_fixed_s", "cache_update_s", "generate_step_s",
              "generate_call_s", "optimizer_tensor_s")
"""What micro.overhead measures (the serving engine's costs and AdamW's cached rate come from
probes of their own and stay as `peak` stored them)."""
COLD = "op_fixed_cold_s"


def child(config: dict[str, Any]) -> dict[str, Any]:
    """Child entry: the fixed costs of the CPU (micro.overhead.measure_overheads)."""
    from llmdissect.micro.overhead import measure_overheads

    return measure_overheads("cpu", config.get("min_time_s", 0.2), config.get("seed", 0))


def quieter(stored: dict[str, Any], probe: dict[str, Any]) -> dict[str, float] | None:
    """What to store of the probe: its fixed costs where its per-operator cost is below the
    stored one (or none is stored), else None: the stored set stays, whole (most of its costs
    are differences of one run's timings, so the two sets are not mixed key by key). The cold
    per-operator cost is a timing of its own, not a difference: where both probes measured it,
    the lower of the two is kept whichever set is (one quick suite's second probe matched
    `peak`'s hot cost, 17.0 against 17.2 us, and read its cold one at 62 us against 38, in a
    slow moment: every inference point priced 25-60 % slow)."""
    new, old = probe.get("op_fixed_s"), stored.get("op_fixed_s")
    if not isinstance(new, (int, float)) or new <= 0:
        return None
    if isinstance(old, (int, float)) and 0 < old <= new:
        colder = _lower_cold(probe, stored)
        return {COLD: colder} if colder is not None else None
    kept = {k: float(probe[k]) for k in PROBE_KEYS if isinstance(probe.get(k), (int, float))}
    if _lower_cold(stored, probe) is not None:
        kept[COLD] = float(stored[COLD])
    return kept


def _lower_cold(a: dict[str, Any], b: dict[str, Any]) -> float | None:
    """a's cold per-operator cost where both measured one and a's is the lower, else None."""
    x, y = a.get(COLD), b.get(COLD)
    if isinstance(x, (int, float)) and isinstance(y, (int, float)) and 0 < x < y:
        return float(x)
    return None


def remeasure_fixed_costs(min_time_s: float = 0.2, timeout_s: float = 120, profile_path: str | None = None
                          ) -> tuple[dict[str, Any], dict[str, float] | None, dict[str, Any]]:
    """Run the probe in a child; store its set in the profile's `cpu` section if it is the
    quieter one. Returns (the probe's output, what was stored or None, the section before)."""
    from llmdissect.calibration_profile import load_profile, update_profile
    from llmdissect.launch import run_child

    result = run_child(TARGET, {"min_time_s": min_time_s}, timeout_s=timeout_s)
    if result.status != "ok" or not result.result:
        raise RuntimeError(f"fixed-cost probe ended {result.status}: {result.error or result.output_tail[-500:]}")
    stored = load_profile(profile_path).get("cpu") or {}
    kept = quieter(stored, result.result)
    if kept:
        update_profile({"cpu": kept}, profile_path)
    return result.result, kept, stored
