"""Export records to JSON Lines, CSV or Parquet."""
from __future__ import annotations

import json
from pathlib import Path

from llmdissect.errors import UserError
from llmdissect.results.frame import record_row
from llmdissect.results.schema import RunRecord

FORMATS = ("jsonl", "csv", "parquet")


def export_records(records: list[RunRecord], fmt: str, out: Path) -> int:
    """Write `records` to `out` in `fmt`; returns how many were written."""
    if fmt not in FORMATS:
        raise UserError(f"unknown export format {fmt!r}; choose one of {', '.join(FORMATS)}")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        if fmt == "jsonl":
            with open(out, "w") as f:
                for r in records:
                    f.write(r.to_json() + "\n")
            return len(records)
        import pandas as pd

        frame = pd.DataFrame([record_row(r) for r in records])
        if fmt == "csv":
            frame.to_csv(out, index=False)
        else:
            # Parquet needs one type per column: lists and mixed values go as JSON text.
            for column in frame.columns:
                if frame[column].map(lambda v: isinstance(v, (list, dict))).any() or \
                        frame[column].dropna().map(type).nunique() > 1:
                    frame[column] = frame[column].map(lambda v: None if v is None else json.dumps(v))
            frame.to_parquet(out, index=False)
    except OSError as e:
        raise UserError(f"cannot write {out}: {e.strerror or e}") from None
    return len(records)
