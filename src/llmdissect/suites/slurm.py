"""`--executor slurm`: one sbatch job script per point still to run, submitted with sbatch.

Why generated scripts and not submitit: a script is a plain, inspectable artefact that a
user can read, edit (partition, account, modules) and resubmit by hand; it needs no extra
package and no pickled Python closures, so the compute nodes only need this package
installed at the same path. Each job runs `llmdissect run SUITE --resume --point KEY
--records-dir DIR` itself, so the job runs its point exactly like a local run (same
isolation, timeout, memory limit, statuses), but it never writes the shared store: SQLite's
WAL mode needs every writer on one host, and the nodes share at best a network file system.
The job writes its record to a per-job file in the job folder (written under a temporary
name and renamed, results/jobfiles.py); dispatching the suite again, or `llmdissect results
import DIR`, merges the finished files into the store, each record once, even while other
jobs still run. A multi-node training point runs `srun` on every node of the allocation:
each node starts torchrun with the c10d rendezvous on the first node, and the node that
holds global rank 0 writes the record (a failure is written by node 0 only).
"""
from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import llmdissect.metric_names as mn
from llmdissect.errors import UserError
from llmdissect.suites.points import DEFAULT_TIMEOUT_S, Planned

RDZV_PORT_BASE = 20000


def jobs_dir(suite_name: str, slurm_dir: Path | None) -> Path:
    """The folder of a suite's job scripts, logs and per-job record files."""
    return (slurm_dir or Path(f"slurm-{suite_name}")).resolve()


def job_script(p: Planned, suite_file: Path, out_dir: Path, timeout_s: float | None,
               max_memory: str | None, extra: list[str]) -> str:
    """The sbatch script of one point."""
    nnodes = int(p.config.get("nnodes", 1)) if p.point.kind in mn.TRAIN_KINDS else 1
    nproc = int(p.config.get("nproc", 1))
    timeout = p.point.timeout_s or timeout_s or DEFAULT_TIMEOUT_S
    minutes = int(timeout // 60) + 10  # the point's own timeout fires first and records `timeout`
    cmd = [sys.executable, "-m", "llmdissect", "run", str(suite_file), "--records-dir", str(out_dir), "--resume",
           "--point", p.key, "--timeout", f"{timeout:g}"]
    if p.point.max_memory or max_memory:
        cmd += ["--max-memory", p.point.max_memory or max_memory]
    lines = ["#!/bin/bash", f"#SBATCH --job-name=llmd-{p.key[:8]}", f"#SBATCH --nodes={nnodes}",
             "#SBATCH --ntasks-per-node=1", f"#SBATCH --time={minutes}",
             f"#SBATCH --output={out_dir / f'point-{p.key}'}.%j.out"]
    if p.config.get("device") == "cuda":
        lines.append(f"#SBATCH --gpus-per-node={nproc}")
    lines += [f"#SBATCH {o}" for o in extra]
    lines += [f"# point {p.key}: {p.point.label()}", "set -eo pipefail", f"cd {shlex.quote(str(Path.cwd()))}"]
    if nnodes == 1:
        lines.append(" ".join(shlex.quote(c) for c in cmd))
    else:
        # one port per job (jobs sharing a head node do not meet), or LLMDISSECT_RDZV_PORT
        lines += ['head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | sed -n 1p)',  # reads all: no SIGPIPE
                  f'port=${{LLMDISSECT_RDZV_PORT:-$(({RDZV_PORT_BASE} + ${{SLURM_JOB_ID:-0}} % 30000))}}',
                  'export LLMDISSECT_RDZV_ENDPOINT="$head:$port"']
        inner = " ".join(shlex.quote(c) for c in cmd) + ' --rdzv-endpoint "$LLMDISSECT_RDZV_ENDPOINT"' \
            + ' --node-rank "$SLURM_NODEID"'
        lines.append(f"srun --nodes={nnodes} --ntasks-per-node=1 bash -c {shlex.quote(inner)}")
    return "\n".join(lines) + "\n"


def write_scripts(plan, suite_file: Path, out_dir: Path, timeout_s: float | None,
                  max_memory: str | None, extra: list[str]) -> list[Path]:
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"cannot create --slurm-dir {out_dir}: {e.strerror}") from None
    scripts = []
    for p in plan.todo():
        path = out_dir / f"point-{p.key}.sbatch"
        path.write_text(job_script(p, suite_file, out_dir, timeout_s, max_memory, extra))
        path.chmod(0o755)
        scripts.append(path)
    submit = out_dir / "submit.sh"
    submit.write_text("#!/bin/bash\n# submit every point of the suite as its own job\nset -e\n"
                      + "".join(f"sbatch --parsable {shlex.quote(str(s))}\n" for s in scripts))
    submit.chmod(0o755)
    return scripts


def dispatch(plan, suite_arg: str, db_path: Path, opts, slurm_dir: Path | None, extra: list[str],
             submit: bool, json_out: bool) -> None:
    from llmdissect.console import console, print_json
    from llmdissect.suites.spec import resolve

    suite_file = resolve(suite_arg).resolve()
    out_dir = jobs_dir(plan.suite.name, slurm_dir)
    scripts = write_scripts(plan, suite_file, out_dir, opts.timeout_s, opts.max_memory, extra)
    jobs: list[str] = []
    sbatch = shutil.which("sbatch")
    if submit and sbatch and scripts:
        for s in scripts:
            done = subprocess.run([sbatch, "--parsable", str(s)], capture_output=True, text=True)
            if done.returncode != 0:
                raise UserError(f"sbatch refused {s.name}: {done.stderr.strip() or done.stdout.strip()} "
                                f"({len(jobs)} job(s) submitted before it)")
            jobs.append(done.stdout.strip().split(";")[0])
        (out_dir / "jobs.json").write_text(json.dumps(dict(zip((s.name for s in scripts), jobs)), indent=1))
    if json_out:
        print_json({"executor": "slurm", "suite": plan.suite.name, "dir": str(out_dir), "db": str(db_path),
                    "scripts": [str(s) for s in scripts], "jobs": jobs, "recorded": len(plan.recorded)})
        return
    console.print(f"{len(scripts)} job script(s) in {out_dir} ({len(plan.recorded)} point(s) already recorded)")
    if jobs:
        console.print(f"submitted {len(jobs)} job(s): {', '.join(jobs)}; merge their records as they end with "
                      f"`llmdissect results import {out_dir} --db {db_path}` (or by running this command again)")
    elif scripts:
        why = "sbatch is not on PATH" if not sbatch else "--no-submit"
        console.print(f"not submitted ({why}); submit with: bash {out_dir / 'submit.sh'}")
