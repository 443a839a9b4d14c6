"""benchmarks/bench_fidelity.py's measured spread: each round's measurements against their
median across rounds, per metric (closed form, no run)."""
import importlib.util
from pathlib import Path

import pytest

from llmdissect.analysis.validate import Pair

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_fidelity.py"


def _module():
    spec = importlib.util.spec_from_file_location("bench_fidelity", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _pair(metric, label, measured):
    return Pair("id", "infer", label, metric, measured, 1.0, "computed")


def test_the_spread_is_each_rounds_distance_from_the_median_measurement():
    rounds = [[_pair("tpot_s", "a", 8.0), _pair("tpot_s", "b", 10.0)],
              [_pair("tpot_s", "a", 10.0), _pair("tpot_s", "b", 10.0)],
              [_pair("tpot_s", "a", 12.0), _pair("tpot_s", "b", 10.0), _pair("ttft_s", "c", 5.0)]]
    spread = _module().measured_spread(rounds)
    # a's median is 10: rounds miss it by 20 %, 0 %, 20 %; b never moves
    assert spread["tpot_s"] == pytest.approx([0.1, 0.0, 0.1])
    assert "ttft_s" not in spread  # measured in one round only: no spread to speak of
