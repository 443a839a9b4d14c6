"""Shared test helpers: run the real `llmdissect` command in a subprocess."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 300, cwd: Path | None = None,
            check: bool = False) -> subprocess.CompletedProcess:
    """`llmdissect ARGS...` as a user would run it; returns the completed process."""
    proc = subprocess.run([sys.executable, "-m", "llmdissect", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})}, cwd=cwd)
    if check and proc.returncode != 0:
        raise AssertionError(f"llmdissect {' '.join(args)} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    return proc


def assert_user_error(proc: subprocess.CompletedProcess, *fragments: str) -> None:
    """Exit 2, one clear line on stderr, no traceback."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = [line for line in proc.stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    for fragment in fragments:
        assert fragment.lower() in lines[0].lower(), (fragment, lines[0])


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "results.db"


@pytest.fixture(autouse=True)
def _isolated_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test gets its own state folder, so no test reads another's store or profile."""
    monkeypatch.setenv("LLMDISSECT_HOME", str(tmp_path / "state"))
    monkeypatch.delenv("LLMDISSECT_DB", raising=False)


@pytest.fixture(scope="session")
def postgres_server():
    """A real PostgreSQL server for the session (tests/postgres_server.py). Where it cannot
    run the tests that need it skip with the reason, and fail in CI, which installs it."""
    from tests.postgres_server import start_postgres

    try:
        server = start_postgres()
    except RuntimeError as e:
        if os.environ.get("CI"):
            pytest.fail(f"no PostgreSQL server in CI: {e}")
        pytest.skip(str(e))
    yield server
    server.stop()


@pytest.fixture
def postgres_url(postgres_server) -> str:
    """A fresh, empty database on the session's server."""
    return postgres_server.new_database()
