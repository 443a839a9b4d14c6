"""Per-job record files: written atomically, imported once whatever the number of imports."""
from __future__ import annotations

import os

import pytest
from tests.conftest import assert_user_error, run_cli

from llmdissect.errors import UserError
from llmdissect.results.jobfiles import (
    SUFFIX,
    import_folder,
    job_file_name,
    read_records_file,
    records_files,
    write_records_file,
)
from llmdissect.results.schema import RunRecord
from llmdissect.results.store import open_store


def records(n: int, suite: str = "s") -> list[RunRecord]:
    return [RunRecord(kind="estimate", source="estimated", suite=suite, config={"i": i}).finish("ok")
            for i in range(n)]


def test_written_whole_under_its_name_and_read_back(tmp_path):
    batch = records(3)
    path = write_records_file(tmp_path / "jobs", job_file_name("point-abc"), batch)
    assert path.name.startswith("point-abc.") and path.name.endswith(SUFFIX)
    assert [r.to_dict() for r in read_records_file(path)] == [r.to_dict() for r in batch]
    assert os.listdir(tmp_path / "jobs") == [path.name]  # no temporary file left behind


def test_a_failed_write_leaves_no_file_under_the_final_name(tmp_path):
    class Unwritable(RunRecord):
        def to_json(self, **kwargs):
            raise OSError(28, "No space left on device")

    bad = Unwritable(kind="estimate", source="estimated")
    with pytest.raises(OSError):
        write_records_file(tmp_path, "point-x.records.jsonl", [*records(1), bad])
    assert list(tmp_path.iterdir()) == []


def test_running_jobs_temporary_files_are_not_imported(tmp_path):
    write_records_file(tmp_path, "a" + SUFFIX, records(2))
    (tmp_path / f".b{SUFFIX}.tmp-123").write_text(records(1)[0].to_json()[:40])  # a job still writing
    (tmp_path / "point-b.12.out").write_text("a job's log\n")
    assert [p.name for p in records_files(tmp_path)] == ["a" + SUFFIX]


def test_importing_again_adds_nothing(tmp_path, db_path):
    write_records_file(tmp_path / "jobs", "a" + SUFFIX, records(2, "s"))
    with open_store(db_path) as store:
        assert vars(import_folder(store, tmp_path / "jobs")) == {"files": 1, "records": 2, "added": 2}
        write_records_file(tmp_path / "jobs", "b" + SUFFIX, records(3, "s"))  # a job that ended since
        for _ in range(3):
            outcome = import_folder(store, tmp_path / "jobs")
        assert vars(outcome) == {"files": 2, "records": 5, "added": 0}
        assert store.count() == 5


def test_a_bad_line_is_one_error_naming_the_file(tmp_path, db_path):
    path = tmp_path / ("bad" + SUFFIX)
    path.write_text(records(1)[0].to_json() + "\n{not json\n")
    with pytest.raises(UserError, match="line 2 is not JSON"):
        read_records_file(path)
    proc = run_cli("results", "import", str(tmp_path), "--db", str(db_path))
    assert_user_error(proc, "bad.records.jsonl line 2")
    with open_store(db_path) as store:
        assert store.count() == 0  # nothing of that file went in


def test_import_command(tmp_path, db_path):
    write_records_file(tmp_path / "jobs", "a" + SUFFIX, records(2))
    proc = run_cli("results", "import", str(tmp_path / "jobs"), "--db", str(db_path), check=True)
    assert "2 added" in proc.stdout and "0 already there" in proc.stdout
    proc = run_cli("results", "import", str(tmp_path / "jobs"), "--db", str(db_path), check=True)
    assert "0 added" in proc.stdout and "2 already there" in proc.stdout
    assert_user_error(run_cli("results", "import", str(tmp_path / "nowhere"), "--db", str(db_path)), "not a folder")


SUITE = ("suite: travel\nentries:\n  - kind: estimate\n    workload: pretrain\n    model: llama2-7b\n"
         "    hardware: 8xa800\n    grid:\n      zero: [0, 3]\n")


def test_a_job_elsewhere_writes_its_file_and_resume_reads_it(tmp_path):
    suite = tmp_path / "travel.yaml"
    suite.write_text(SUITE)
    jobs = tmp_path / "jobs"
    for _ in range(2):  # the second run finds both points in the folder and runs nothing
        proc = run_cli("run", str(suite), "--records-dir", str(jobs), "--resume", check=True)
    assert "records in" in proc.stdout
    assert not (tmp_path / "state" / "results.db").exists()  # the default store was not touched
    assert len(records_files(jobs)) == 2
    assert_user_error(run_cli("run", str(suite), "--records-dir", "/proc/llmdissect/jobs"),
                      "cannot create --records-dir")
    assert_user_error(run_cli("run", str(suite), "--records-dir", str(jobs), "--executor", "slurm"),
                      "--records-dir", "--executor local")
