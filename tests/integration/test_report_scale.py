"""Repeats folded into points (report, validate, compare), the regression verdict, and a
report of 1,000 records that stays small: stores built in-process from the records of a
real quick-suite run (tests/fixtures/quick_records.jsonl, copied by tests/replicate.py)."""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from conftest import assert_user_error, run_cli
from llmdissect.analysis.history import verdicts
from llmdissect.analysis.repeats import PointRecord, fold
from llmdissect.report.build import Report, build_sections, write_report
from llmdissect.report.select import select_points
from llmdissect.results.store import open_store
from replicate import base_records, copies

N = 1000
POINTS = 33
"""The records of the fixture's quick-suite run, each its own configuration (the issue's 29,
since grown by the serving and estimate steps)."""


def _store(path: Path, **kw) -> Path:
    with open_store(path) as store:
        store.add_new(list(copies(base_records(), N, **kw)))
    return path


@pytest.fixture(scope="module")
def base() -> list[dict]:
    return base_records()


@pytest.fixture(scope="module")
def nightly(tmp_path_factory, base) -> Path:
    """1,000 records that repeat the quick suite's configurations; one pretrain point's newest
    quarter is 30 % slower."""
    slow = next(i for i, d in enumerate(base) if d["kind"] == "pretrain")
    return _store(tmp_path_factory.mktemp("nightly") / "r.db", slower={slow: 1.3})


def test_fixture_is_one_quick_run_of_distinct_configurations(base) -> None:
    assert len(base) == POINTS
    assert len(fold(copies(base, len(base)))) == POINTS


def test_thousand_records_are_one_point_per_configuration_each_finding_once(nightly, tmp_path, base) -> None:
    records, runs = select_points(nightly)
    assert runs == N and len(records) == POINTS
    assert all(isinstance(r, PointRecord) for r in records)
    assert sorted(r.count for r in records) == sorted(Counter(i % POINTS for i in range(N)).values())
    sections = build_sections(records, {}, estimate_missing=True)
    history = next(s for s in sections if s.id == "history")
    rows = history.tables[0].rows
    assert len(rows) == POINTS  # every point once, with its count and interval
    assert all(row[2] >= N // POINTS for row in rows)
    assert all(row[5] <= row[4] <= row[6] for row in rows if row[4] is not None)
    sentences = [f for s in sections for f in s.findings]
    repeated = [f for f, n in Counter(sentences).items() if n > 1]
    assert not repeated, repeated
    html, _ = write_report(Report("t", "s", sections), tmp_path)
    assert html.stat().st_size < 2**20
    assert "report.html" in str(html)


def test_the_slower_point_is_the_only_regression(nightly, base) -> None:
    records, _ = select_points(nightly)
    judged = verdicts(records)
    measured = [d for d in base if d["source"] == "measured" and d["kind"] != "ops"]  # ops: no headline
    assert len(judged) == len(measured)
    slower = [v for v in judged if v.verdict == "slower"]
    assert len(slower) == 1 and [v for v in judged if v.verdict == "faster"] == []
    v = slower[0]
    assert v.point.kind == "pretrain" and v.metric == "step_time_s"
    assert 0.25 < v.change < 0.35
    sections = build_sections(records, {}, estimate_missing=False)
    assert sections[0].id == "history"  # the verdicts lead the report
    assert sum(f.startswith("Slower:") for f in sections[0].findings) == 1


def test_report_cli_folds_and_lists_runs_on_request(nightly, tmp_path) -> None:
    out = tmp_path / "rep"
    run_cli("report", "--db", str(nightly), "-o", str(out), "--runs", "--no-estimate-missing", check=True)
    md = (out / "report.md").read_text()
    assert f"{N} record(s) as {POINTS} point(s)" in md
    assert "## Every run" in md and md.count("| r0") >= N  # a row per run only here


def test_validate_pairs_each_point_once(nightly) -> None:
    proc = run_cli("validate", "--db", str(nightly), "--json", check=True)
    out = json.loads(proc.stdout)
    base = base_records()
    measured = [i for i in range(N) if base[i % POINTS]["source"] == "measured"]
    assert out["measured_records"] == len(measured)
    assert out["points"] == sum(1 for d in base if d["source"] == "measured")
    ids = Counter((p["record_id"], p["metric"], p["label"]) for p in out["pairs"])
    assert ids and max(ids.values()) == 1
    assert all(p["runs"] >= N // POINTS for p in out["pairs"])


def test_compare_since_finds_what_got_slower(nightly) -> None:
    proc = run_cli("compare", "--db", str(nightly), "--since", "2026-01-01T12:59", "--json", check=True)
    out = json.loads(proc.stdout)
    # the jitter of the copies is 3 %: a change past 10 % beyond the noise is the slowed point's
    moved = [r for r in out["rows"] if r["verdict"] == "beyond noise" and abs(r["ratio"] - 1) > 0.1]
    assert {(r["configuration"], r["metric"]) for r in moved} == {("tiny-llama single mb=2", "step_time_s"),
                                                                  ("tiny-llama single mb=2", "tokens_per_s")}
    assert_user_error(run_cli("compare", "--db", str(nightly), "--rev", "abc"), "--rev")
    assert_user_error(run_cli("compare", "--db", str(nightly)), "--since")


def test_results_list_pages(nightly) -> None:
    first = json.loads(run_cli("results", "list", "--db", str(nightly), "--limit", "10", "--json", check=True).stdout)
    second = json.loads(run_cli("results", "list", "--db", str(nightly), "--limit", "10", "--page", "2", "--json",
                                check=True).stdout)
    assert len(first) == len(second) == 10
    assert second[-1]["started_at"] < first[0]["started_at"]
    assert not {r["id"] for r in first} & {r["id"] for r in second}


def test_compare_rev_pairs_two_git_revisions(tmp_path, base) -> None:
    """8 runs per configuration, the newer half at another revision with the pretrain point slower."""
    slow = next(i for i, d in enumerate(base) if d["kind"] == "pretrain")
    records = list(copies(base, 8 * POINTS, slower={slow: 1.3}, recent_share=0.5))
    for i, r in enumerate(records):
        r.env = {**r.env, "git_revision": "aaa111" if i < 4 * POINTS else "bbb222"}
    db = tmp_path / "rev.db"
    with open_store(db) as store:
        store.add_new(records)
    out = json.loads(run_cli("compare", "--db", str(db), "--rev", "aaa..bbb", "--json", check=True).stdout)
    assert (out["a"], out["b"]) == ("revision aaa", "revision bbb")
    moved = [r for r in out["rows"] if r["verdict"] == "beyond noise" and abs(r["ratio"] - 1) > 0.1]
    assert {r["configuration"] for r in moved} == {"tiny-llama single mb=2"}
