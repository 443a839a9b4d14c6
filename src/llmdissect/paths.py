"""Where llm-dissect keeps its state: results database and calibration profiles."""
from __future__ import annotations

import os
from pathlib import Path

DB_ENV = "LLMDISSECT_DB"
HOME_ENV = "LLMDISSECT_HOME"


def state_dir() -> Path:
    """`$LLMDISSECT_HOME`, else `.llmdissect` in the working directory."""
    return Path(os.environ.get(HOME_ENV) or ".llmdissect")


def default_db_path() -> Path:
    """`$LLMDISSECT_DB`, else `<state dir>/results.db`."""
    env = os.environ.get(DB_ENV)
    return Path(env) if env else state_dir() / "results.db"


def calibration_path() -> Path:
    """The local machine's calibration profile (measured peaks, efficiencies, alpha/beta)."""
    return state_dir() / "calibration.json"
