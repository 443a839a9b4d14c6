"""Folding repeats into points (analysis.repeats) and the regression verdict (analysis.history)."""
from __future__ import annotations

from llmdissect.analysis.history import split_recent, verdict
from llmdissect.analysis.repeats import PointRecord, fold
from llmdissect.results.schema import RunRecord

ENV = {"cpu_model": "Test CPU", "cpu_cores": 2, "gpus": []}


def run(step: float, i: int, seed: int | None = None, status: str = "ok", **cfg) -> RunRecord:
    config = {"model": "m", "engine": "single", **cfg, **({"seed": seed} if seed is not None else {})}
    return RunRecord(kind="pretrain", status=status, config=config, env={**ENV, "git_revision": f"rev{i // 4}"},
                     started_at=f"2026-01-01T00:{i:02d}:00", metrics={
                         "step_time_s": {"n": 3, "median": step, "min": step * 0.9, "max": step * 1.1,
                                         "samples": [step * 0.9, step, step * 1.1]},
                         "tokens_per_s": 100 / step})


def test_repeats_fold_into_one_point_with_medians_across_runs() -> None:
    records = [run(1.0, 0, seed=0), run(3.0, 1, seed=1), run(2.0, 2, seed=2), run(5.0, 3, engine="fsdp")]
    points = fold(records)
    assert len(points) == 2
    p = next(r for r in points if r.config["engine"] == "single")
    assert isinstance(p, PointRecord) and p.count == 3 and p.id == records[2].id  # the latest run's record
    stats = p.metrics["step_time_s"]
    assert stats["median"] == 2.0 and stats["min"] == 0.9 and abs(stats["max"] - 3.3) < 1e-9 and stats["n"] == 9
    assert stats["samples"] == [1.0, 3.0, 2.0]  # the runs' medians: the interval is across repeats
    assert p.metrics["tokens_per_s"] == 50.0
    lo, hi = p.interval()
    assert 1.0 <= lo <= 2.0 <= hi <= 3.0


def test_failed_records_stay_records() -> None:
    points = fold([run(1.0, 0), run(1.0, 1, status="failed")])
    assert [type(r).__name__ for r in points] == ["PointRecord", "RunRecord"]


def test_split_recent_takes_a_quarter_and_at_least_two() -> None:
    assert split_recent([1, 2, 3, 4]) == ([1, 2], [3, 4])
    assert split_recent(list(range(20))) == (list(range(15)), list(range(15, 20)))


def test_verdict_slower_faster_and_noise() -> None:
    steady = [1.0 + 0.01 * (i % 3) for i in range(12)]
    slower = fold([run(v * (1.3 if i >= 9 else 1.0), i, seed=i) for i, v in enumerate(steady)])[0]
    faster = fold([run(v * (0.7 if i >= 9 else 1.0), i, seed=i) for i, v in enumerate(steady)])[0]
    same = fold([run(v, i, seed=i) for i, v in enumerate(steady)])[0]
    assert verdict(slower).verdict == "slower" and 0.25 < verdict(slower).change < 0.35
    assert verdict(faster).verdict == "faster"
    assert verdict(same).verdict == "within noise"
    assert verdict(fold([run(1.0, i, seed=i) for i in range(3)])[0]) is None  # too few runs


def test_history_section_marks_new_revisions_and_lists_the_slower_point() -> None:
    from llmdissect.report.sections_repeats import _revision_changes, history

    points = fold([run(1.0 * (1.3 if i >= 9 else 1.0), i, seed=i) for i in range(12)])
    assert _revision_changes(points[0]) == [4.5, 8.5]  # rev0 -> rev1 -> rev2, four runs each
    sec = history(points)
    assert [f for f in sec.findings if f.startswith("Slower:")] == [sec.findings[1]]
    assert "git revision rev2 against rev0, rev1, rev2" in sec.findings[1]
    assert sec.tables[0].rows[0][2] == 12 and sec.plots[0].name == "history-trend"
