"""Predicted against measured: each measured record paired with the estimate of the same
configuration (the shared config keys of docs/developing.md), error per metric, and MAPE.

error = (predicted - measured) / measured   (signed: above 0 the model over-predicts)
MAPE  = mean over pairs of |error|          (mean absolute percentage error)

The estimate is, in this order: one stored for this very record (`env.validates`, what an
earlier `validate` stored); a standalone estimate of the same configuration stored by the
user (`llmdissect estimate`, no `validates`: a prediction made before the run, newest
wins); else one computed here on this machine's calibration profile. An estimate stored
for another record of the same configuration is never reused: it was made with the model
and calibration of its day, and would hide what they predict now. Metrics:
training `step_time_s` (median), `tokens_per_s`, `peak_memory_bytes` (measured peak of live
tensors vs the predicted `memory.total_bytes` less `other_bytes`, the framework allowance the
measured counters do not see); inference `ttft_s`, `tpot_s` (medians),
`decode_tokens_per_s`, `peak_memory_bytes`; serving (a run that names its server in
`config.served`) the medians of TTFT and TPOT and `request_throughput_per_s`, against the
simulation of its load (analysis.serve_estimate); collectives `busbw_bytes_per_s` per row
(predicted by the alpha-beta model, with the calibration's fitted alpha and beta when the
profile holds them, for all_reduce, all_gather and reduce_scatter).
"""
from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import llmdissect.metric_names as mn
from llmdissect.analysis.predict import estimate_measured, join_key
from llmdissect.analysis.repeats import runs_of
from llmdissect.errors import UserError
from llmdissect.results.schema import RunRecord


def _median(m: dict, key: str) -> float | None:
    v = m.get(key)
    return v.get("median") if isinstance(v, dict) else v


def _tensor_bytes(m: dict) -> float | None:
    """The estimate's tensors: memory.total_bytes less the framework's allowance (the CUDA
    context and the allocator's slack), which the measured peak of live tensors does not see
    (torch.cuda.max_memory_allocated, or the CPU's tracker). 0 on a CPU, where it is none."""
    mem = (m or {}).get(mn.MEMORY) or {}
    total = mem.get(mn.TOTAL_BYTES)
    return None if total is None else total - (mem.get(mn.OTHER_BYTES) or 0.0)


def _est(path: tuple[str, ...]) -> Callable[[dict], float | None]:
    def get(m: dict) -> float | None:
        for p in path:
            m = (m or {}).get(p)
        return m
    return get


TRAIN_METRICS = {mn.STEP_TIME_S: (lambda m: _median(m, mn.STEP_TIME_S), _est((mn.TIME, mn.STEP_S))),
                 mn.TOKENS_PER_S: (lambda m: m.get(mn.TOKENS_PER_S), _est((mn.TOKENS_PER_S,))),
                 mn.PEAK_MEMORY_BYTES: (lambda m: m.get(mn.PEAK_MEMORY_BYTES), _tensor_bytes)}
INFER_METRICS = {mn.TTFT_S: (lambda m: _median(m, mn.TTFT_S), _est((mn.TIME, mn.TTFT_S))),
                 mn.TPOT_S: (lambda m: _median(m, mn.TPOT_S), _est((mn.TIME, mn.TPOT_S))),
                 mn.DECODE_TOKENS_PER_S: (lambda m: _median(m, mn.DECODE_TOKENS_PER_S),
                                          _est((mn.DECODE_TOKENS_PER_S,))),
                 mn.PEAK_MEMORY_BYTES: (lambda m: m.get(mn.PEAK_MEMORY_BYTES), _tensor_bytes)}
SERVE_METRICS = {mn.SERVE_TTFT_P50_S: (lambda m: _median(m, mn.TTFT_S), lambda m: _median(m, mn.TTFT_S)),
                 mn.SERVE_TPOT_P50_S: (lambda m: _median(m, mn.TPOT_S), lambda m: _median(m, mn.TPOT_S)),
                 mn.REQUEST_THROUGHPUT_PER_S: (lambda m: m.get(mn.REQUEST_THROUGHPUT_PER_S),
                                               lambda m: m.get(mn.REQUEST_THROUGHPUT_PER_S))}
METRIC_ORDER = mn.VALIDATED


@dataclass
class Pair:
    record_id: str
    kind: str
    label: str
    metric: str
    measured: float
    predicted: float
    estimate: str
    """The stored estimate's id, or `computed` (this machine's calibration, now)."""
    runs: int = 1
    """How many runs of this configuration the measured value is the median of."""

    @property
    def error(self) -> float:
        return (self.predicted - self.measured) / self.measured

    def to_dict(self) -> dict[str, Any]:
        return {"record_id": self.record_id, "kind": self.kind, "label": self.label, "metric": self.metric,
                "measured": self.measured, "predicted": self.predicted, "error": self.error,
                "estimate": self.estimate, "runs": self.runs}


@dataclass
class Validation:
    pairs: list[Pair] = field(default_factory=list)
    unpaired: list[tuple[str, str, str]] = field(default_factory=list)
    """(record id, kind, why no estimate)."""
    computed: list[RunRecord] = field(default_factory=list)
    """Estimates computed here (no stored one matched), for the caller to store if it wants."""
    unpredicted: list[tuple[str, str, str]] = field(default_factory=list)
    """(record id, metric, why): a measured metric the estimate has no number for."""

    def not_predicted(self) -> list[dict[str, Any]]:
        """Per metric, the measured records it was not predicted for, and why (said, not left out)."""
        out: dict[tuple[str, str], list[str]] = {}
        for rid, metric, why in self.unpredicted:
            out.setdefault((metric, why), []).append(rid)
        for rid, kind, why in self.unpaired:
            out.setdefault((f"every {kind} metric", why), []).append(rid)
        return [{"metric": m, "reason": why, "records": ids} for (m, why), ids in out.items()]

    def summary(self) -> list[dict[str, Any]]:
        rows = []
        for metric in METRIC_ORDER:
            errs = [p.error for p in self.pairs if p.metric == metric]
            if not errs:
                continue
            worst = max(errs, key=abs)
            rows.append({"metric": metric, "pairs": len(errs), "mape": sum(map(abs, errs)) / len(errs),
                         "median_error": statistics.median(errs), "worst_error": worst})
        return rows

    def to_dict(self) -> dict[str, Any]:
        return {"summary": self.summary(), "pairs": [p.to_dict() for p in self.pairs],
                "unpaired": [{"record_id": i, "kind": k, "reason": r} for i, k, r in self.unpaired],
                "not_predicted": self.not_predicted(),
                "mape_all": (sum(abs(p.error) for p in self.pairs) / len(self.pairs)) if self.pairs else None}


def label(r: RunRecord) -> str:
    c = r.config
    if r.kind in mn.TRAIN_KINDS:
        return (f"{c.get('model')} {c.get('engine')} x{c.get('nproc')} zero{c.get('zero')} rc={c.get('recompute')} "
                f"mb{c.get('micro_batch')}x{c.get('seq')}"
                + (f" {c.get('method')}" if c.get("method") != "full" else "")
                + (f" ep{c['ep']}" if c.get("ep", 1) > 1 else ""))
    if r.kind == mn.INFER:
        return f"{c.get('model')} b{c.get('batch')} in{c.get('input_len')} out{c.get('output_len')} {c.get('quant')}"
    if r.kind == mn.COMM:
        return f"{c.get('backend')} x{c.get('world_size')} {','.join(c.get('ops') or [])}"
    if r.kind == mn.SERVE:
        served = c.get("served") or {}
        return (f"{served.get('model', c.get('model'))} {served.get('engine', 'server')} rate {c.get('request_rate')} "
                f"in{c.get('input_len')} out{c.get('output_len')}")
    return r.kind


def _made_for(records: list[RunRecord], estimates: Iterable[RunRecord]) -> tuple[dict[int, RunRecord], dict]:
    """(estimate stored for each record, standalone estimates by join key). For a point
    (analysis.repeats) only the estimate stored for its newest run: one made for an older run
    came from the model and calibration of that day, and a change to perfmodel since would
    not show in the scoreboard. Only one per record is kept however many stream by, so memory
    grows with the points, not the estimates."""
    newest: dict[str, int] = {}
    for i, r in enumerate(records):
        newest[r.id] = i  # the record's own id is its newest run (analysis.repeats)
    made: dict[int, RunRecord] = {}
    stored: dict[tuple, RunRecord] = {}
    for e in estimates:  # oldest first: the newest of a configuration wins
        if e.env.get("validates"):
            i = newest.get(e.env["validates"])
            if i is not None:
                made[i] = e
            continue
        k = join_key(e.config.get("kind_estimated", ""), e.config)
        if k is not None:
            stored[k] = e
    return made, stored


def validate_records(records: list[RunRecord], estimates: Iterable[RunRecord]) -> Validation:
    """Pair every ok measured record (or point: analysis.repeats) with an estimate and compare
    metric by metric; each distinct configuration is estimated once. `estimates` may stream."""
    cache: dict[str, Any] = {}
    made_for, stored = _made_for(records, estimates)
    v = Validation()
    for i, r in enumerate(records):
        if r.source != "measured" or r.status != "ok":
            continue
        if r.kind == mn.COMM:
            _comm_pairs(r, v)
            continue
        if r.kind == mn.SERVE:
            _serve_pairs(r, v, made_for.get(i))
            continue
        metrics = TRAIN_METRICS if r.kind in mn.TRAIN_KINDS else INFER_METRICS if r.kind == mn.INFER else None
        if metrics is None:
            v.unpaired.append((r.id, r.kind, f"the estimator has no model of `{r.kind}` runs"))
            continue
        est = _estimate_once(cache, r)
        if isinstance(est, str):
            v.unpaired.append((r.id, r.kind, est))
            continue
        _compare(r, v, metrics, made_for.get(i) or stored.get(join_key(r.kind, est.config)), est)
    return v


def _compare(r: RunRecord, v: Validation, metrics: dict, match: RunRecord | None, est) -> None:
    """Pair `r`'s metrics with the stored estimate `match`, or with `est` computed now (kept in
    v.computed); a measured metric with no predicted value is listed, not left out."""
    if match is not None:
        est_metrics, est_id = match.metrics, match.id
    else:
        computed = est.to_record({"calibration": "this machine's profile", "validates": r.id})
        v.computed.append(computed)
        est_metrics, est_id = computed.metrics, "computed"
    for name, (measured_of, predicted_of) in metrics.items():
        meas, pred = measured_of(r.metrics), predicted_of(est_metrics)
        if meas and pred is not None:
            v.pairs.append(Pair(r.id, r.kind, label(r), name, float(meas), float(pred), est_id, runs_of(r)))
        elif meas:
            why = ("no time estimate: no ceilings for this device (run `llmdissect peak`)"
                   if est_metrics.get("time") is None and r.kind != mn.SERVE else "the estimate has no value for it")
            v.unpredicted.append((r.id, name, why))


def _estimate_once(cache: dict[str, Any], r: RunRecord):
    """The Estimate of the record's configuration, or why there is none; made once per
    distinct (kind, config), however many records share it."""
    import json

    key = json.dumps([r.kind, r.config], sort_keys=True, default=str)
    if key not in cache:
        try:
            cache[key] = estimate_measured(r.kind, r.config)
        except (UserError, KeyError, TypeError) as e:
            cache[key] = f"no estimate: {e}"
    return cache[key]


def _serve_pairs(r: RunRecord, v: Validation, stored: RunRecord | None) -> None:
    """A serving run against the simulation of its load on the engine it names."""
    from llmdissect.analysis.serve_estimate import estimate_measured_serve

    est = None
    if stored is None:
        try:
            est = estimate_measured_serve(r.config, r.metrics)
        except (UserError, KeyError, TypeError, ValueError) as e:
            v.unpaired.append((r.id, r.kind, f"no estimate: {e}"))
            return
    _compare(r, v, SERVE_METRICS, stored, est)


def _comm_pairs(r: RunRecord, v: Validation) -> None:
    from llmdissect.calibration_profile import load_profile
    from llmdissect.perfmodel.ceilings import machine_for
    from llmdissect.perfmodel.comm import FACTORS, collective_time_s
    from llmdissect.specs import resolve_platform

    c = r.config
    if c.get("hardware") != "cpu":
        v.unpaired.append((r.id, mn.COMM, "collectives are predicted here for CPU (gloo) runs only"))
        return
    n = int(c["world_size"])
    net = machine_for(resolve_platform("cpu", n), c.get("dtype", "fp32"), load_profile()).network
    source = "calibration fit" if net.fits else "alpha-beta defaults"
    rows = [row for row in r.metrics.get("rows", []) if row["op"] in FACTORS]
    if not rows:
        v.unpaired.append((r.id, mn.COMM, "no all_reduce, all_gather or reduce_scatter rows"))
    for row in rows:
        t = collective_time_s(net, row["op"], row[mn.SIZE_BYTES], n)
        if t > 0 and row[mn.BUSBW_BYTES_PER_S] > 0:
            pred = row[mn.SIZE_BYTES] / t * row["busbw_factor"]
            v.pairs.append(Pair(r.id, mn.COMM, f"{row['op']} {row['placement']} {row[mn.SIZE_BYTES]} B",
                                mn.BUSBW_BYTES_PER_S, float(row[mn.BUSBW_BYTES_PER_S]), float(pred), source,
                                runs_of(r)))
