"""Validation: which estimate a measured record is paired with, and the error arithmetic."""
from __future__ import annotations

import pytest

from llmdissect.analysis.predict import estimate_measured, estimate_options, local_hardware
from llmdissect.analysis.validate import validate_records
from llmdissect.results.schema import RunRecord

TRAIN = {"model": "debug-llama", "hardware": "cpu", "engine": "single", "nproc": 1, "nnodes": 1, "zero": 0,
         "offload": "none", "recompute": "none", "attn": "sdpa", "dtype": "fp32", "optimizer": "adamw",
         "micro_batch": 2, "seq": 32, "grad_accum": 1, "tp": 1, "pp": 1, "method": "full", "quant": "none"}


def measured(metrics: dict, **config) -> RunRecord:
    return RunRecord(kind="pretrain", config={**TRAIN, **config}, metrics=metrics).finish("ok")


def test_hardware_names_map_to_specs():
    assert local_hardware({"hardware": "cpu"}) == "cpu"
    assert local_hardware({"hardware": "NVIDIA A800-SXM4-80GB"}) == "A800-80G-SXM"
    assert local_hardware({"hardware": "NVIDIA GeForce RTX 4090"}) == "RTX-4090"
    assert local_hardware({"hardware": "a toaster"}) is None


def test_measured_config_becomes_the_same_estimate():
    kind, opts = estimate_options("finetune", {**TRAIN, "nproc": 2, "method": "qlora", "lora_rank": 4,
                                               "quant": "nf4", "lora_targets": "q_proj,v_proj"})
    assert kind == "finetune" and opts["gpus"] == 2 and opts["lora_rank"] == 4 and opts["quant"] == "nf4"
    est = estimate_measured("pretrain", TRAIN)
    for key in ("model", "engine", "zero", "micro_batch", "seq", "method", "quant"):
        assert est.config[key] == TRAIN[key], key


def test_errors_against_a_computed_estimate_and_a_stored_one():
    record = measured({"peak_memory_bytes": 1e6, "tokens_per_s": 100.0,
                       "step_time_s": {"median": 0.5, "n": 3}})
    v = validate_records([record], [])
    assert len(v.computed) == 1
    predicted = v.computed[0].metrics["memory"]["total_bytes"]
    pair = next(p for p in v.pairs if p.metric == "peak_memory_bytes")
    assert pair.estimate == "computed" and pair.error == pytest.approx((predicted - 1e6) / 1e6)
    summary = {s["metric"]: s for s in v.summary()}
    assert summary["peak_memory_bytes"]["mape"] == pytest.approx(abs(pair.error))

    stored = v.computed[0]
    stored.metrics = {**stored.metrics, "memory": {**stored.metrics["memory"], "total_bytes": 1.5e6}}
    other = estimate_measured("pretrain", {**TRAIN, "seq": 64}).to_record()  # another config: not used
    v2 = validate_records([record], [stored, other])
    pair2 = next(p for p in v2.pairs if p.metric == "peak_memory_bytes")
    assert pair2.estimate == stored.id and pair2.error == pytest.approx(0.5) and not v2.computed


def test_an_estimate_made_for_another_record_is_not_reused():
    first = measured({"peak_memory_bytes": 1e6, "step_time_s": {"median": 0.5, "n": 3}})
    made = validate_records([first], []).computed[0]  # stored by the validate of an earlier run
    made.metrics = {**made.metrics, "memory": {**made.metrics["memory"], "total_bytes": 9e6}}
    second = measured({"peak_memory_bytes": 1e6, "step_time_s": {"median": 0.5, "n": 3}})
    again = validate_records([first, second], [made])
    by_record = {p.record_id: p for p in again.pairs if p.metric == "peak_memory_bytes"}
    assert by_record[first.id].estimate == made.id and by_record[first.id].predicted == 9e6
    assert by_record[second.id].estimate == "computed" and by_record[second.id].predicted != 9e6
    assert [e.env["validates"] for e in again.computed] == [second.id]


def test_records_without_a_model_are_listed_not_paired():
    serve = RunRecord(kind="serve", config={"model": "tiny-llama"}, metrics={"ttft_s": {"median": 0.1}}).finish("ok")
    failed = measured({}).finish("failed", "boom")
    v = validate_records([serve, failed], [])
    assert v.pairs == [] and [(k, "which model, hardware and engine" in r) for _, k, r in v.unpaired] == \
        [("serve", True)]


def test_a_point_pairs_with_its_newest_runs_estimate_not_an_older_ones():
    from llmdissect.analysis.repeats import fold

    older = measured({"peak_memory_bytes": 1e6, "step_time_s": {"median": 0.5, "n": 3}})
    made = validate_records([older], []).computed[0]  # the estimate of an earlier day's model
    made.metrics = {**made.metrics, "memory": {**made.metrics["memory"], "total_bytes": 9e6}}
    newer = measured({"peak_memory_bytes": 1e6, "step_time_s": {"median": 0.5, "n": 3}})
    [point] = fold([older, newer])
    assert point.id == newer.id and len(point.runs) == 2
    v = validate_records([point], [made])
    pair = next(p for p in v.pairs if p.metric == "peak_memory_bytes")
    assert pair.estimate == "computed" and pair.predicted != 9e6
    assert [e.env["validates"] for e in v.computed] == [newer.id]
    # the newest run's own estimate is the one it pairs with
    v2 = validate_records([point], [made, v.computed[0]])
    assert next(p for p in v2.pairs if p.metric == "peak_memory_bytes").estimate == v.computed[0].id
