"""The published-results format: loading, its checks, and the error of a point (closed forms)."""
from pathlib import Path

import pytest

from llmdissect.errors import UserError
from llmdissect.published.check import Outcome, Summary, predict, summarize
from llmdissect.published.points import PublishedPoint, load_points, read_points

POINT = """
[[point]]
id = "{id}"
category = "infer"
source = "https://example.org/paper"
where = "Table 1"
quote = "row"
model = "Llama 2 7B"
hardware = "A100"
config = "batch 1"
metric = "{metric}"
unit = "tokens/s"
value = {value}
{extra}
"""
ESTIMATE = """
[point.estimate]
kind = "infer"
model = "llama2-7b"
hardware = "a100"
batch = 1
input_len = 128
output_len = 128
"""


def _write(tmp_path: Path, *points: str) -> Path:
    (tmp_path / "set.toml").write_text("".join(points))
    return tmp_path


def _point(**kw) -> str:
    values = {"id": "p1", "metric": "decode_tokens_per_s", "value": 100.0, "extra": ESTIMATE, **kw}
    return POINT.format(**values)


def test_a_point_loads_and_is_estimated_from_the_catalogue(tmp_path):
    (p,) = load_points(folder=_write(tmp_path, _point()))
    assert p.expressible and p.estimate["model"] == "llama2-7b"
    o = predict(p)
    assert o.reason == "" and o.predicted > 0 and o.ratio == pytest.approx(o.predicted / 100.0)
    # batch-1 decode of 13.5 GB of bf16 weights at 2.04 TB/s cannot beat the bandwidth bound
    assert o.predicted < 2.039e12 / (6.74e9 * 2)
    assert o.exact and o.mfu is not None and o.mfu < 1


@pytest.mark.parametrize("extra, fragment", [
    ("", None),
    ('missing = "speculative decoding"', None),
])
def test_without_estimate_options_a_point_says_why(tmp_path, extra, fragment):
    (p,) = load_points(folder=_write(tmp_path, _point(extra=extra)))
    o = predict(p)
    assert o.predicted is None and o.reason == (p.missing or "no estimate options")


SERVE = """
[point.estimate]
kind = "serve"
model = "llama2-7b"
hardware = "a100"
dtype = "fp16"
input_len = 128
output_len = 128
num_prompts = 64
max_concurrency = 16
profile = "vllm"
"""


def test_a_serving_point_is_simulated_from_the_catalogue(tmp_path):
    (p,) = load_points(folder=_write(tmp_path, _point(metric="requests_per_s", value=1.0, extra=SERVE)))
    o = predict(p)
    assert o.reason == "" and o.predicted > 0 and o.fits is None
    # 16 requests in flight each wait at least 128 decode steps, and a step of 16 sequences
    # reads the 13.5 GB of fp16 weights at no more than the 2.04 TB/s datasheet bandwidth
    assert o.predicted < 16 / (128 * 6.74e9 * 2 / 2.039e12)


def test_a_metric_the_serving_run_has_not_is_a_reason(tmp_path):
    (p,) = load_points(folder=_write(tmp_path, _point(metric="mfu", value=0.5, extra=SERVE)))
    assert "no model of mfu for serve points" in predict(p).reason


def test_an_option_the_estimator_rejects_is_a_reason_not_a_crash(tmp_path):
    (p,) = load_points(folder=_write(tmp_path, _point(extra=ESTIMATE + 'quant = "no-such-scheme"\n')))
    assert predict(p).reason.startswith("the estimator rejects it")


@pytest.mark.parametrize("kw, fragment", [
    ({"metric": "speed"}, "unknown metric 'speed'"),
    ({"value": -1}, "value must be positive"),
    ({"extra": 'colour = "red"'}, "colour"),
])
def test_bad_points_name_file_point_and_field(tmp_path, kw, fragment):
    folder = _write(tmp_path, _point(**kw))
    with pytest.raises(UserError, match=fragment) as e:
        read_points(folder / "set.toml")
    assert "set.toml: p1: field" in str(e.value)


def test_duplicate_ids_and_unknown_categories_are_refused(tmp_path):
    with pytest.raises(UserError, match="appears twice"):
        load_points(folder=_write(tmp_path, _point(), _point()))
    with pytest.raises(UserError, match="unknown category"):
        load_points("training")


def _outcome(ratio: float, missing: str = "", category: str = "infer") -> Outcome:
    p = PublishedPoint(id=f"x{ratio}", category=category, source="https://e.org", where="", quote="", model="",
                       hardware="", config="", metric="tokens_per_s", unit="", value=10.0, missing=missing,
                       estimate={"kind": "infer"})
    return Outcome(p, predicted=10.0 * ratio, mfu=0.5 * ratio)


def test_summary_bands_and_median_are_closed_forms():
    # ratios 0.5, 0.8, 1.1, 1.3: |errors| 0.5 0.2 0.1 0.3 -> median 0.25; max(r, 1/r) = 2, 1.25, 1.1, 1.3
    s = Summary.of([_outcome(r) for r in (0.5, 0.8, 1.1, 1.3)])
    assert s.points == 4 and s.median_abs_error == pytest.approx(0.25)
    assert s.within[1.25] == pytest.approx(0.5) and s.within[1.5] == pytest.approx(0.75)


def test_summarize_keeps_approximate_points_apart_and_flags_mfu_above_1():
    out = summarize([_outcome(1.0), _outcome(3.0, missing="FP8"), _outcome(2.5, category="pretrain")])
    assert out["overall"]["points"] == 2 and out["approximate"]["points"] == 1
    assert out["per_category"]["infer"]["points"] == 1 and out["per_category"]["pretrain"]["points"] == 1
    assert sorted(out["mfu_above_1"]) == ["x2.5", "x3.0"]
