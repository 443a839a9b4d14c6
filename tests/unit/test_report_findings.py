"""Findings sentences: numbers from the data, and 'too noisy to tell' exactly when the
bootstrap intervals overlap (pure functions, hand-made samples)."""
from __future__ import annotations

from llmdissect.analysis import findings
from llmdissect.analysis.findings import Measured
from llmdissect.report.section import cell


def test_ablation_numbers_and_noise() -> None:
    base = Measured("baseline", 100.0, [98, 99, 100, 101, 102], 400 * 2**20)
    clear = Measured("recompute=full", 80.0, [79, 80, 80, 81, 79], 250 * 2**20)
    noisy = Measured("lora", 104.0, [70, 90, 104, 120, 140], 400 * 2**20)
    s_clear, s_noisy = findings.ablation(base, [clear, noisy], "tiny-llama, 2 cores")
    assert s_clear.startswith("recompute=full cut throughput by 20 % (100 -> 80 tokens/s) and cut peak memory by 38 %")
    assert "too noisy" not in s_clear
    assert "raised throughput by 4 %" in s_noisy and "left peak memory unchanged" in s_noisy
    assert "too noisy to tell" in s_noisy


def test_scaling_and_breakdown() -> None:
    pts = [(1, Measured("a", 6.0, [5.9, 6.0, 6.1])), (4, Measured("b", 24.0, [23.5, 24.0, 24.5]))]
    (s,) = findings.scaling("Decode throughput", pts, "batch", "tokens/s", "here")
    assert "from 6 to 24 tokens/s (4.00x) as batch grows from 1 to 4" in s and "noisy" not in s
    lines = findings.breakdown([("r1", {"forward": 0.3, "backward": 0.6, "optimizer": 0.1}),
                                ("r2", {"forward": 0.2, "backward": 0.7, "optimizer": 0.1})])
    assert lines[0].startswith("Backward is the largest part of the step: 60% (r1) to 70% (r2)")


def test_collectives_trend_follows_the_data() -> None:
    (up,) = findings.collectives({"all_reduce": [(1024, 1e6), (2**20, 1e8)]}, "gloo x2")
    (down,) = findings.collectives({"all_reduce": [(1024, 1e8), (2**20, 1e6)]}, "gloo x2")
    assert "rises" in up and "falls" in down


def test_validation_and_cells() -> None:
    lines = findings.validation([("a", "step_time_s", 1.0, 0.85), ("b", "tokens_per_s", 100.0, 150.0),
                                 ("c", "tokens_per_s", 100.0, 90.0)])
    assert lines[0] == "step_time_s: the estimate is off by -15% (a)."
    assert "off by 30% on average over 2 pair(s); the largest error is +50% (b)" in lines[1]
    assert ([cell(v) for v in (None, True, 13324.4, 0.5, 2.5e-5, 1e9)]
            == ["-", "yes", "13324", "0.5", "2.5e-05", "1e+09"])


def test_engines_side_by_side_and_which_is_ahead_where():
    from llmdissect.analysis.findings import engines

    rows = {"vllm": {2.0: (51.6, 0.025), 8.0: (196.1, 0.027), float("inf"): (1022.5, 0.263)},
            "transformers": {2.0: (51.6, 0.031), 8.0: (199.3, 0.024), float("inf"): (727.3, 0.288)}}
    (sentence,) = engines(rows, "tiny-llama on cpu")
    assert sentence.startswith("transformers against vllm on tiny-llama on cpu: 2/s: 1.00x the output tokens/s")
    assert "unbounded: 0.71x" in sentence and "neither is 10 % ahead" in sentence
    flipped = engines({"a": rows["vllm"], "b": rows["transformers"]}, "m")[0]
    assert "unbounded: 1.41x" in flipped and flipped.endswith("(a is ahead from unbounded).")
