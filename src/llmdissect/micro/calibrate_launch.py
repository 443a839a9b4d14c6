"""`calibrate` end to end: `peak`, then the operators of a small model (per-class
efficiencies) and, unless told not to, a 2-process gloo collective fit, each a stored
record and each written into this machine's calibration profile, which `estimate` reads.

The three calibration names: this module measures; `calibration_profile` reads and writes
the profile file; `perfmodel.ceilings` picks from it the ceilings an estimate uses.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any


def run_calibration(db_path: Path, *, model: str = "tiny-llama", tokens: int = 512, comm: bool = True,
                    progress: bool = True) -> list[Any]:
    """Measure and store; returns the records in order (it stops at the first that failed)."""
    from llmdissect.micro.ops_config import parse_ops_config
    from llmdissect.micro.ops_launch import run_ops
    from llmdissect.micro.peak_launch import run_peak
    from llmdissect.results.recording import save

    cfg = parse_ops_config(model=model, tokens=tokens, quant=False, min_time_s=0.1)
    records = []
    record, _ = run_peak(quick=False, progress=progress, min_time_s=0.5)
    records.append(save(record, db_path))
    if record.status == "ok":
        record, _ = run_ops(cfg, progress=progress)
        records.append(save(record, db_path))
    if record.status == "ok" and comm:
        from llmdissect.micro.comm_config import CommRequest
        from llmdissect.micro.comm_launch import build_config, run_comm, store_fits

        req = CommRequest(ops="all_reduce,all_gather", min_bytes="1K", max_bytes="16M", factor=4, iters=10,
                          warmup=2, backend="gloo", nproc=2, timeout_s=240)
        crec, _ = run_comm(build_config(req), req, progress=progress)
        records.append(save(crec, db_path))
        if crec.status == "ok":
            store_fits(crec)
    return records
