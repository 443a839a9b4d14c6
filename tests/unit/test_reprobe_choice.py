"""Which of two fixed-cost probes the quick suite keeps (micro.reprobe.quieter): pure logic."""
from llmdissect.micro.reprobe import PROBE_KEYS, quieter
from llmdissect.perfmodel.ceilings import FIXED_COST_KEYS

PROBE = {"op_fixed_s": 16e-6, "op_fixed_cold_s": 33e-6, "forward_fixed_s": 290e-6, "cache_update_s": 40e-6,
         "generate_step_s": 300e-6, "generate_call_s": 1e-3, "optimizer_tensor_s": 25e-6, "layer_forward_s": 224e-6}


def test_a_quieter_probe_replaces_the_whole_set_it_measures():
    kept = quieter({"op_fixed_s": 31e-6, "forward_fixed_s": 500e-6, "serve_engine_step_s": 1e-3}, PROBE)
    assert kept == {k: PROBE[k] for k in PROBE_KEYS}
    assert set(PROBE_KEYS) <= set(FIXED_COST_KEYS)  # every key it stores is one the estimator reads
    assert "serve_engine_step_s" not in kept  # measured by a probe of its own


def test_a_slower_probe_leaves_the_stored_set_whole():
    assert quieter({"op_fixed_s": 15e-6, "forward_fixed_s": 500e-6}, PROBE) is None
    assert quieter({"op_fixed_s": 16e-6}, PROBE) is None  # a tie keeps what peak stored


def test_nothing_stored_or_nothing_measured():
    assert quieter({}, PROBE) == {k: PROBE[k] for k in PROBE_KEYS}
    assert quieter({"op_fixed_s": 31e-6}, {"op_fixed_s": 0.0}) is None
    assert quieter({"op_fixed_s": 31e-6}, {}) is None


def test_the_cold_cost_is_the_lower_of_the_two_probes_whichever_set_is_kept():
    # the second probe is quieter hot but read its cold cost in a slow moment: peak's cold stays
    kept = quieter({"op_fixed_s": 17.2e-6, "op_fixed_cold_s": 38e-6}, {**PROBE, "op_fixed_s": 17.0e-6,
                                                                         "op_fixed_cold_s": 62e-6})
    assert kept["op_fixed_s"] == 17.0e-6 and kept["op_fixed_cold_s"] == 38e-6
    assert kept["forward_fixed_s"] == PROBE["forward_fixed_s"]
    # the stored set stays, but the probe's lower cold cost replaces peak's
    assert quieter({"op_fixed_s": 15e-6, "op_fixed_cold_s": 50e-6}, PROBE) == {"op_fixed_cold_s": 33e-6}
    assert quieter({"op_fixed_s": 15e-6, "op_fixed_cold_s": 30e-6}, PROBE) is None
