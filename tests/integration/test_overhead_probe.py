"""The fixed-cost probe `peak` runs (micro.overhead), on this machine's CPU: every cost it
stores is there, finite and not negative, and its parts are ordered as they must be."""
import math

import pytest

from llmdissect.micro.overhead import measure_overheads
from llmdissect.perfmodel.ceilings import FIXED_COST_KEYS


def test_the_probe_measures_every_fixed_cost_the_estimator_reads():
    out = measure_overheads("cpu", min_time_s=0.02)
    for key in FIXED_COST_KEYS:
        if key.startswith("serve_engine"):  # measured by micro.serve_engine, below
            continue
        assert math.isfinite(out[key]) and out[key] >= 0, (key, out[key])
    assert out["op_fixed_s"] > 0
    # a whole one-token forward runs every layer, so it takes longer than one of them
    assert out["forward_one_token_s"] > out["layer_forward_s"]
    # the per-operator cost is the layer time split over its operators (floats: not bit-exact)
    assert out["op_fixed_s"] * out["layer_ops"] == pytest.approx(out["layer_forward_s"], rel=1e-12)
    # the cache's update is what the layer took beyond its uncached forward (never below 0)
    assert out["cache_update_s"] == pytest.approx(max(0.0, out["layer_forward_cached_s"] - out["layer_forward_s"]))
    # the cold cost is the same layer's, timed after the caches were emptied, split the same way
    assert out["op_fixed_cold_s"] * out["layer_ops"] == pytest.approx(out["layer_forward_cold_s"], rel=1e-12)
    assert out["op_fixed_cold_s"] > 0


def test_the_serving_engine_probe_times_transformers_own_iterations():
    from llmdissect.micro.serve_engine import DEEP, MANY, engine_costs, measure_serve_engine

    out = measure_serve_engine("cpu")
    for key in ("serve_engine_step_s", "serve_engine_layer_s", "serve_engine_seq_s"):
        assert key in FIXED_COST_KEYS and math.isfinite(out[key]) and out[key] >= 0, (key, out[key])
    for key in ("serve_iteration_1_s", f"serve_iteration_{MANY}_s", "serve_forward_1_s", f"serve_forward_{MANY}_s"):
        assert 0 < out[key] < 1, (key, out[key])
    # the engine's costs are what its iterations take beyond the forwards (never below 0)
    one = out["serve_iteration_1_s"] - out["serve_forward_1_s"]
    assert out["serve_engine_step_s"] + 2 * out["serve_engine_layer_s"] == pytest.approx(max(0.0, one)) \
        or out["serve_engine_step_s"] == 0
    assert 0 <= out[f"serve_engine_{DEEP}_layers_s"] < 1
    assert engine_costs(one, out[f"serve_iteration_{MANY}_s"] - out[f"serve_forward_{MANY}_s"],
                        out[f"serve_engine_{DEEP}_layers_s"], 2) == {
        k: out[k] for k in ("serve_engine_step_s", "serve_engine_layer_s", "serve_engine_seq_s")}


def test_the_optimizer_probe_times_adamw_in_the_cache_as_the_passes_count_bytes():
    from llmdissect.micro.optimizer_rates import measure_optimizer_cached_rate, probe_elements
    from llmdissect.perfmodel.ceilings import MEASURED_RATE_KEYS

    out = measure_optimizer_cached_rate(4 * 2**20, 20e-6, min_time_s=0.02)
    assert set(MEASURED_RATE_KEYS) <= set(out)
    assert out["optimizer_probe_elements"] == probe_elements(4 * 2**20)
    # 80 bytes an element in well under a second, and not faster than any cache could give
    rate = out["optimizer_cached_bytes_per_s"]
    assert 80 * out["optimizer_probe_elements"] / rate < 1 and rate < 1e13, rate


def test_the_quick_suites_second_probe_stores_its_set_only_where_it_is_quieter(tmp_path):
    import json

    from llmdissect.micro.reprobe import PROBE_KEYS, remeasure_fixed_costs

    profile = tmp_path / "calibration.json"
    # a stored per-operator cost of a whole second: any real probe is quieter and replaces the set
    profile.write_text(json.dumps({"cpu": {"op_fixed_s": 1.0, "forward_fixed_s": 2.0, "serve_engine_step_s": 3.0}}))
    probe, kept, _ = remeasure_fixed_costs(min_time_s=0.02, profile_path=str(profile))
    stored = json.loads(profile.read_text())["cpu"]
    assert kept and 0 < stored["op_fixed_s"] == probe["op_fixed_s"] < 1.0
    assert {k: stored[k] for k in PROBE_KEYS} == {k: probe[k] for k in PROBE_KEYS}
    assert stored["serve_engine_step_s"] == 3.0  # another probe's cost stays
    # a stored cost no probe can beat stays, with the rest of its set
    profile.write_text(json.dumps({"cpu": {"op_fixed_s": 1e-12, "forward_fixed_s": 2.0}}))
    _, kept, before = remeasure_fixed_costs(min_time_s=0.02, profile_path=str(profile))
    assert kept is None and json.loads(profile.read_text())["cpu"] == {"op_fixed_s": 1e-12, "forward_fixed_s": 2.0}
    assert before == {"op_fixed_s": 1e-12, "forward_fixed_s": 2.0}  # the section the probe was held against
