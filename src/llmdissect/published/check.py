"""Every published point against the estimate of its configuration.

ratio = predicted / published; error = ratio - 1 (above 0 the model over-predicts).
A point is *within 1.25x* when max(ratio, 1/ratio) <= 1.25. Estimates use the hardware
catalogue's figures alone (no calibration profile), so the result is the same on every
machine and a test can hold it. No torch: pure functions, milliseconds a point; a serving
point (`kind = "serve"`) runs the serving simulation, about a second.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Optional

import llmdissect.metric_names as mn
from llmdissect.errors import UserError
from llmdissect.published.bounds import bandwidth_share
from llmdissect.published.points import CATEGORIES, PublishedPoint

ESTIMATE_PATH: dict[str, tuple[str, ...]] = {
    "tokens_per_s_per_device": (mn.TOKENS_PER_S_PER_DEVICE,),
    "tokens_per_s": (mn.TOKENS_PER_S,),
    "mfu": (mn.MFU,),
    "hfu": (mn.HFU,),
    "step_time_s": (mn.TIME, mn.STEP_S),
    "peak_memory_bytes": (mn.MEMORY, mn.TOTAL_BYTES),
    "ttft_s": (mn.TIME, mn.TTFT_S),
    "tpot_s": (mn.TIME, mn.TPOT_S),
    "e2e_latency_s": (mn.TIME, "e2e_latency_s"),
    "decode_tokens_per_s": (mn.DECODE_TOKENS_PER_S,),
    "prefill_tokens_per_s": (mn.PREFILL_TOKENS_PER_S,),
}
"""Where each published metric sits in an estimate's metrics."""
SERVE_PATH: dict[str, tuple[str, ...]] = {
    "requests_per_s": (mn.REQUEST_THROUGHPUT_PER_S,),
    "tokens_per_s": (mn.OUTPUT_TOKENS_PER_S,),
}
"""... and in a simulated serving run's (analysis.serve_estimate): a serving benchmark's
tokens/s counts the generated tokens."""

BANDS = (1.25, 1.5)


@dataclass(frozen=True)
class Outcome:
    point: PublishedPoint
    predicted: Optional[float] = None
    reason: str = ""
    """Why there is no prediction ("" when there is one)."""
    mfu: Optional[float] = None
    fits: Optional[bool] = None
    bandwidth_share: Optional[float] = None
    """The share of the peak memory bandwidth the published number needs for its decode steps'
    weights alone (published.bounds); above 1 the run cannot have been as its options say."""

    @property
    def ratio(self) -> Optional[float]:
        return None if self.predicted is None else self.predicted / self.point.value

    @property
    def exact(self) -> bool:
        """Predicted, and the configuration fully expressed (nothing marked missing)."""
        return self.predicted is not None and not self.point.missing

    def to_dict(self) -> dict[str, Any]:
        p = self.point
        return {"id": p.id, "category": p.category, "metric": p.metric, "published": p.value,
                "predicted": self.predicted, "ratio": self.ratio, "missing": p.missing, "reason": self.reason,
                "mfu": self.mfu, "fits": self.fits, "bandwidth_share": self.bandwidth_share, "source": p.source,
                "model": p.model, "hardware": p.hardware}


def _lookup(metrics: dict[str, Any], path: tuple[str, ...]) -> Optional[float]:
    v: Any = metrics
    for key in path:
        v = v.get(key) if isinstance(v, dict) else None
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _model(point: PublishedPoint, name: str):
    from llmdissect.specs import get_model
    from llmdissect.specs.models import ModelSpec

    if point.model_config_ is None:
        return get_model(name)
    try:
        return ModelSpec(name=point.id, **point.model_config_)
    except TypeError as e:
        raise UserError(f"published point {point.id}: bad model_config: {e}") from None


def predict(point: PublishedPoint) -> Outcome:
    """The estimate of one point, or why there is none."""
    from llmdissect.perfmodel.request import estimate_for, estimate_request

    if point.estimate is None:
        return Outcome(point, reason=point.missing or "no estimate options")
    options = dict(point.estimate)
    kind = options.pop("kind", None)
    path = (SERVE_PATH if kind == mn.SERVE else ESTIMATE_PATH).get(point.metric)
    if path is None:
        return Outcome(point, reason=f"the estimator has no model of {point.metric} for {kind} points")
    try:
        request = estimate_request(str(kind), **options)
        model = _model(point, request.model)
        if request.kind == mn.SERVE:
            from llmdissect.analysis.serve_estimate import run_serve_estimate

            est = run_serve_estimate(request, model=model, profile={})
        else:
            est = estimate_for(request, model, {})
    except UserError as e:
        return Outcome(point, reason=f"the estimator rejects it: {e}")
    predicted = _lookup(est.metrics, path)
    if predicted is None or predicted <= 0:
        return Outcome(point, reason=f"the estimate has no {point.metric}")
    fits = est.fits if mn.FITS in est.metrics else None  # a simulated serving run ran: it fit
    share = bandwidth_share(point, model)
    return Outcome(point, predicted=predicted, mfu=_lookup(est.metrics, (mn.MFU,)), fits=fits, bandwidth_share=share)


@dataclass(frozen=True)
class Summary:
    """Median |error| and the share within each band, over one group of predicted points."""

    points: int
    median_abs_error: Optional[float]
    within: dict[float, Optional[float]]

    @classmethod
    def of(cls, outcomes: list[Outcome]) -> Summary:
        ratios = [o.ratio for o in outcomes if o.ratio is not None]
        if not ratios:
            return cls(0, None, {b: None for b in BANDS})
        spread = [max(r, 1 / r) for r in ratios]
        return cls(len(ratios), statistics.median(abs(r - 1) for r in ratios),
                   {b: sum(s <= b for s in spread) / len(spread) for b in BANDS})

    def to_dict(self) -> dict[str, Any]:
        return {"points": self.points, "median_abs_error": self.median_abs_error,
                **{f"within_{b:g}x": v for b, v in self.within.items()}}


def check_all(points: list[PublishedPoint]) -> list[Outcome]:
    return [predict(p) for p in points]


def summarize(outcomes: list[Outcome]) -> dict[str, Any]:
    """Per category and overall, over the exactly expressed points; the approximate ones
    (estimated, with something marked missing) apart; any predicted MFU above 1; and the points
    whose published number needs more than the device's peak memory bandwidth (published.bounds)."""
    exact = [o for o in outcomes if o.exact]
    approx = [o for o in outcomes if o.predicted is not None and not o.exact]
    per = {c: Summary.of([o for o in exact if o.point.category == c]).to_dict() for c in CATEGORIES}
    return {"overall": Summary.of(exact).to_dict(), "per_category": per,
            "approximate": Summary.of(approx).to_dict(),
            "not_predicted": sum(o.predicted is None for o in outcomes),
            "mfu_above_1": [o.point.id for o in outcomes if o.mfu is not None and o.mfu > 1],
            "beyond_peak_bandwidth": [o.point.id for o in outcomes
                                      if o.bandwidth_share is not None and o.bandwidth_share > 1]}


def published_record(category: str | None = None):
    """The outcomes of every shipped point (of one category), as a `validation` record, and them."""
    from llmdissect.published.points import load_points
    from llmdissect.results.schema import RunRecord

    outcomes = check_all(load_points(category))
    record = RunRecord(kind=mn.VALIDATION, source="estimated", config={"set": "published", "category": category},
                       metrics={"summary": summarize(outcomes), "points": [o.to_dict() for o in outcomes]})
    return record.finish("ok"), outcomes
