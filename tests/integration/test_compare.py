"""`llmdissect compare A B`: run ids, suites and store files; ratios and the noise verdict.

Stores hold RunRecord objects with the documented training metric names (step_time_s Stats
with samples, tokens_per_s, peak_memory_bytes): a real run cannot be made 30 % slower on
purpose, and the verdict must be checked on both sides of the noise.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_report_render import train

from conftest import assert_user_error, run_cli
from llmdissect.analysis.compare import bootstrap_ci, difference, pair_records
from llmdissect.results import open_store


def _store(path: Path, records, suite: str) -> Path:
    with open_store(path) as s:
        for r in records:
            r.suite = suite
            s.add(r)
    return path


@pytest.fixture(scope="module")
def stores(tmp_path_factory) -> tuple[Path, Path, list[str]]:
    d = tmp_path_factory.mktemp("cmp")
    # same configs; the single run is 30 % slower on B (tight samples), the recompute run only
    # differs by noise (wide samples around the same centre)
    a = [train(step=1.0, seed=1), train(step=1.2, seed=2, recompute="full")]
    b = [train(step=1.3, seed=3), train(step=1.2, seed=4, recompute="full")]
    for r in (a[1], b[1]):
        r.metrics["step_time_s"]["samples"] = [v * (1 + 0.4 * (-1) ** i) for i, v in
                                               enumerate(r.metrics["step_time_s"]["samples"])]
    db_a = _store(d / "a.db", a, "before")
    db_b = _store(d / "b.db", b, "after")
    both = _store(d / "both.db", [*train_copy(a), *train_copy(b)], None)
    return db_a, db_b, [a[0].id, b[0].id, str(both)]


def train_copy(records):
    from llmdissect.results.schema import RunRecord

    return [RunRecord.from_dict(r.to_dict()) for r in records]


def test_difference_verdicts() -> None:
    fast, slow = train(step=1.0, seed=1), train(step=1.3, seed=3)
    d = difference("step_time_s", fast.metrics, slow.metrics)
    assert d.beyond_noise and d.p_value < 0.05 and d.ratio == pytest.approx(1.3, rel=0.05)
    same = difference("step_time_s", fast.metrics, train(step=1.0, seed=9).metrics)
    assert same.beyond_noise is False
    lo, hi = bootstrap_ci([1.0, 1.1, 0.9, 1.05, 0.95])
    assert 0.9 <= lo < hi <= 1.1
    assert difference("tokens_per_s", fast.metrics, slow.metrics).beyond_noise  # per-step rates from step times
    assert difference("peak_memory_bytes", fast.metrics, slow.metrics).beyond_noise is None  # a scalar: no samples


def test_pairs_only_same_configs() -> None:
    a = [train(seed=1), train(seed=2, recompute="full")]
    b = [train(seed=3, recompute="selective"), train(seed=4)]
    pairs = pair_records(a, b)
    assert len(pairs) == 1 and pairs[0].a is a[0] and pairs[0].b is b[1]


def test_compare_store_files_json(stores) -> None:
    db_a, db_b, _ = stores
    out = json.loads(run_cli("compare", str(db_a), str(db_b), "--json", check=True).stdout)
    rows = {(r["configuration"].split()[2] if "recompute" in r["configuration"] else "base", r["metric"]): r
            for r in out["rows"]}
    base = rows[("base", "step_time_s")]
    assert base["verdict"] == "beyond noise" and base["ratio"] == pytest.approx(1.3, rel=0.05)
    assert rows[("recompute=full", "step_time_s")]["verdict"] == "within noise"
    assert any("beyond the noise" in f for f in out["findings"])


def test_compare_run_ids_terminal_and_report(stores, tmp_path: Path) -> None:
    _, db_b, (id_a, id_b, both) = stores
    proc = run_cli("compare", id_a[:8], id_b[:8], "--db", both, "--out", str(tmp_path / "cmp"), check=True)
    assert "beyond noise" in proc.stdout and "1.3" in proc.stdout
    html = (tmp_path / "cmp" / "report.html").read_text()
    assert 'data-section="compare"' in html and "beyond noise" in html


def test_compare_suites(stores) -> None:
    db_a, _, _ = stores
    proc = run_cli("compare", "before", "before", "--db", str(db_a), check=True)
    assert "within noise" in proc.stdout  # a suite against itself: ratio 1, never beyond noise
    assert "beyond noise" not in proc.stdout


def test_compare_bad_input(stores, tmp_path: Path) -> None:
    db_a, _, _ = stores
    assert_user_error(run_cli("compare", "nope", "before", "--db", str(db_a)), "neither")
    assert_user_error(run_cli("compare", str(tmp_path / "missing.db"), "before", "--db", str(db_a)), "not found")
