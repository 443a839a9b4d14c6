"""`llmdissect validate --published` on the shipped set: deterministic, so its figures are held here."""
import json
from pathlib import Path

from conftest import assert_user_error, run_cli
from llmdissect.published.check import published_record
from llmdissect.published.points import CATEGORIES, load_points
from llmdissect.results import open_store

# The shipped set's figures on the exactly expressed points (docs/published.md); a change to
# perfmodel/ or to the set that makes either worse fails here. Raise them as the model improves.
# finetune has one exactly expressed point (NeMo AutoModel's Llama 3.1 8B LoRA row, 1.14x); torchtune's
# tables give the sequence length as a cap or run torch.compile, and NeMo AutoModel's 70B rows run an
# interleaved pipeline or torch.compile, and the DGX Cloud recipe's rows pack SQuAD, so theirs are
# approximate. (The approximate share within 1.25x was 0.597 before LoRA's adapters were priced at their
# roofline, which moved torchtune's compiled single-GPU QLoRA row out of the band, and before the 2026-12-04
# fine-tuning points, four of them outside it.) The finetune figure was 0.141 until the loss's passes
# stopped being counted twice (its forward pass again in the backward, its backward pass in the forward):
# the 8B LoRA row's step lost its forward cross-entropy pass once and went from 1.141x to 1.150x.
HELD = {"infer": {"median_abs_error": 0.046, "within_1.25x": 0.833},
        "pretrain": {"median_abs_error": 0.034, "within_1.25x": 1.0},
        "finetune": {"median_abs_error": 0.151, "within_1.25x": 1.0}}
OVERALL = {"median_abs_error": 0.046, "within_1.25x": 0.903}
APPROXIMATE = {"median_abs_error": 0.145, "within_1.25x": 0.584}


def test_every_shipped_point_has_its_source_and_loads():
    points = load_points()
    assert len(points) >= 150
    for p in points:
        assert p.source.startswith("https://") and p.quote and p.where, p.id
        assert p.expressible or p.missing, f"{p.id}: neither estimate options nor what is missing"


def test_figures_do_not_regress_and_no_mfu_above_1():
    record, outcomes = published_record()
    s = record.metrics["summary"]
    for group, held in [*((c, HELD[c]) for c in HELD), ("overall", OVERALL), ("approximate", APPROXIMATE)]:
        got = s[group] if group in ("overall", "approximate") else s["per_category"][group]
        assert got["median_abs_error"] <= held["median_abs_error"] + 1e-9, (group, got)
        assert got["within_1.25x"] >= held["within_1.25x"] - 1e-9, (group, got)
    assert s["mfu_above_1"] == []
    assert all(o.reason for o in outcomes if o.predicted is None)


def test_cli_prints_stores_and_filters(db_path: Path):
    proc = run_cli("validate", "--published", "--category", "infer", "--db", str(db_path), check=True)
    assert "Published vs predicted" in proc.stdout and "within 1.25x" in proc.stdout
    assert "gptfast-llama2-7b-bf16-a100-bs1" in proc.stdout
    with open_store(db_path) as store:
        (rec,) = store.query(kind="validation")
    assert rec.config == {"set": "published", "category": "infer"}
    assert {p["category"] for p in rec.metrics["points"]} == {"infer"}
    out = json.loads(run_cli("validate", "--published", "--json", "--db", str(db_path), check=True).stdout)
    assert {p["category"] for p in out["metrics"]["points"]} <= set(CATEGORIES)
    assert len(out["metrics"]["points"]) == len(load_points())


def test_bad_options_are_one_line(db_path: Path):
    assert_user_error(run_cli("validate", "--published", "--category", "training", "--db", str(db_path)),
                      "unknown category 'training'")
    assert_user_error(run_cli("validate", "--category", "infer", "--db", str(db_path)), "--published only")
    assert_user_error(run_cli("validate", "--published", "--suite", "quick", "--db", str(db_path)), "drop --suite")


def test_the_report_shows_the_newest_validation():
    from llmdissect.report.sections_estimate import published

    record, outcomes = published_record("infer")
    sec = published([record])
    assert sec is not None and sec.title == "Estimates against published results"
    assert [p.name for p in sec.plots] == ["published-vs-predicted"]
    every = next(t for t in sec.tables if t.title == "Every predicted point")
    assert len(every.rows) == sum(o.predicted is not None for o in outcomes)
    assert published([]) is None
