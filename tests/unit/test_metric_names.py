"""llmdissect.metric_names holds exactly the record kinds and metric names docs/metrics.md
defines, so that the code and the doc cannot drift apart."""
from __future__ import annotations

import re
from pathlib import Path

import llmdissect.metric_names as mn
from llmdissect.results import schema

DOCS = Path(__file__).resolve().parents[2] / "docs"
DOC = (DOCS / "metrics.md").read_text()

# Backticked words of the metric sections that are not metric names: the identifiers of an
# ops or comm row, values of `placement`, a server's response field, a command, code.
NOT_METRICS = {"op", "shape", "dtype", "pass", "placement", "in-place", "out-of-place", "usage", "peak",
               "optimizer.step()", "torch.cuda.max_memory_allocated", "time_s.n"}


def _constants() -> dict[str, str]:
    return {k: v for k, v in vars(mn).items() if k.isupper() and isinstance(v, str)}


def _groups() -> dict[str, tuple]:
    return {k: v for k, v in vars(mn).items() if k.isupper() and isinstance(v, tuple)}


def _documented_metrics() -> set[str]:
    """Every backticked name from "## Training" on; a backtick holding a list (`a, b, c`) gives
    each name, and `metrics.x` gives x."""
    body = DOC[DOC.index("## Training"):]
    names: set[str] = set()
    for quoted in re.findall(r"`([^`]+)`", body):
        for word in (w.strip() for w in quoted.split(",")):
            if word in NOT_METRICS or "/" in word or word.endswith(".py") or word.startswith("-"):
                continue  # a file or a command-line option, not a metric
            word = word.removeprefix("metrics.")
            assert re.fullmatch(r"[a-z][a-z0-9_]*", word), f"docs/metrics.md: `{word}` is not a metric name; " \
                "add it to NOT_METRICS if it is not meant as one"
            names.add(word)
    return names


def _documented_kinds() -> tuple[str, ...]:
    listed = re.search(r"`kind` \(([^;)]+)", DOC).group(1)
    return tuple(k.strip() for k in listed.split("|"))


def test_each_constant_is_its_name():
    """STEP_TIME_S = "step_time_s": the constant reads as the key it stands for."""
    assert {k: v for k, v in _constants().items() if k != v.upper()} == {}


def test_metric_names_are_exactly_the_documented_ones():
    kinds = set(mn.KINDS)
    names = {v for v in _constants().values() if v not in kinds}
    documented = _documented_metrics()
    assert sorted(documented - names) == [], "documented in docs/metrics.md, missing from llmdissect.metric_names"
    assert sorted(names - documented) == [], "in llmdissect.metric_names, not defined in docs/metrics.md"


def test_record_kinds_are_the_documented_ones():
    assert mn.KINDS == _documented_kinds()
    assert set(mn.KINDS) == {v for k, v in _constants().items() if v in mn.KINDS}
    assert schema.KINDS is mn.KINDS


def test_groups_hold_only_defined_names():
    defined = set(_constants().values())
    for name, group in _groups().items():
        assert set(group) <= defined, name
        assert len(set(group)) == len(group), f"{name} repeats a name"
    grouped = {v for g in _groups().values() for v in g}
    assert sorted(defined - grouped) == [], "every name belongs to a kind's group"


def test_estimate_names_as_the_doc_lists_them():
    estimates = DOC[DOC.index("## Estimates"):]
    memory = re.search(r"`memory`: `([^`]+)`", estimates).group(1)
    assert tuple(w.strip() for w in memory.split(",")) == mn.MEMORY_METRICS
    train_time = re.search(r"`time`: `([^`]+)`", estimates).group(1)
    assert tuple(w.strip() for w in train_time.split(",")) == mn.TRAIN_TIME_METRICS
    infer_time = re.search(r"\(or `([^`]+)` for inference\)", estimates).group(1)
    assert tuple(w.strip() for w in infer_time.split(",")) == mn.INFER_TIME_METRICS
    # docs/developing.md: "Estimates: `memory.<x>_bytes`, `time.<x>_s`, `tokens_per_s`, ..."
    developing = (DOCS / "developing.md").read_text()
    listed = developing[developing.index("Estimates: `"):]
    listed = listed[:listed.index("`.") + 1]
    assert tuple(w.split(".")[0] for w in re.findall(r"`([^`]+)`", listed)) == mn.ESTIMATE_METRICS


def test_validation_uses_the_validated_names():
    from llmdissect.analysis import validate

    assert tuple(validate.TRAIN_METRICS) == mn.VALIDATED_TRAIN
    assert tuple(validate.INFER_METRICS) == mn.VALIDATED_INFER
    assert validate.METRIC_ORDER == mn.VALIDATED
