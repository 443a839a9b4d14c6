"""`llmdissect run quick` (the built-in quick suite, the tool's main job) and
`llmdissect run SUITE` for suite files (a built-in name such as `paper`, or a path)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

import llmdissect.metric_names as mn
from llmdissect.cli.options import DbOpt, DbPath, JsonOpt


def run_suite(
    suite: str = typer.Argument("quick", help="'quick', a built-in suite (paper, ...) or a suite YAML file."),
    db: DbPath = DbOpt,
    only: str = typer.Option("", help="quick: comma-separated step names to run (default: all)."),
    plan: bool = typer.Option(False, "--plan", help="Print the plan (points, predictions, actions) and exit."),
    resume: bool = typer.Option(False, "--resume", help="Run only the points not yet recorded in the store."),
    retry_failed: bool = typer.Option(False, "--retry-failed", help="With --resume: also run again the points "
                                                                    "that failed, ran out of memory or timed out."),
    force: bool = typer.Option(False, "--force", help="Run points the estimator says cannot fit."),
    timeout: Optional[float] = typer.Option(None, "--timeout", help="Seconds per point (an entry's own wins) "
                                                                    "[1800]; past it the point is a timeout."),
    max_memory: Optional[str] = typer.Option(None, "--max-memory", help="Address-space limit per process, e.g. "
                                                                        "4G (an entry's own wins); past it: oom."),
    executor: str = typer.Option("local", "--executor", help="local (here, one point after another) | slurm "
                                                             "(one sbatch job per point)."),
    slurm_dir: Optional[Path] = typer.Option(None, "--slurm-dir", help="slurm: where the job scripts go "
                                                                      "[./slurm-SUITE]."),
    slurm_opt: list[str] = typer.Option([], "--slurm-opt", help="slurm: extra #SBATCH line, e.g. "
                                                                "--slurm-opt=--partition=gpu (repeatable)."),
    submit: bool = typer.Option(True, "--submit/--no-submit", help="slurm: call sbatch (when on PATH)."),
    records_dir: Optional[Path] = typer.Option(None, "--records-dir", help="Write each point's record to a "
                                               "per-job file in this folder instead of the store (a job on "
                                               "another host; the Slurm jobs do this); merge with "
                                               "`llmdissect results import DIR`."),
    point: Optional[str] = typer.Option(None, "--point", hidden=True, help="Run only this point key."),
    rdzv_endpoint: Optional[str] = typer.Option(None, "--rdzv-endpoint", hidden=True,
                                                help="Multi-node point: host:port of the rendezvous."),
    node_rank: int = typer.Option(0, "--node-rank", hidden=True, help="Multi-node point: this node's rank."),
    json_out: bool = JsonOpt,
) -> None:
    """Run a suite of benchmarks on this machine and store every record."""
    from llmdissect.errors import UserError

    if suite == "quick":
        if plan:
            _quick_plan(json_out)
            return
        if resume or retry_failed or force or point or json_out or executor != "local":
            raise UserError("the quick suite takes only --db, --only and --plan; --resume, --force, --json and "
                            "--executor apply to suite files")
        from llmdissect.suites.quick import run_quick

        failed = run_quick(db, only=[s for s in only.split(",") if s])
        raise typer.Exit(1 if failed else 0)
    if only:
        raise UserError("--only applies to the quick suite")
    if executor not in ("local", "slurm"):
        raise UserError(f"--executor must be local or slurm, got {executor!r}")
    if timeout is not None and timeout <= 0:
        raise UserError(f"--timeout must be above 0 seconds, got {timeout:g}")
    if max_memory is not None:
        from llmdissect.units import parse_bytes

        parse_bytes(max_memory, "--max-memory")
    from llmdissect.suites.runner import RunOptions, execute, exit_code, make_plan, plan_record

    if retry_failed and not resume:
        raise UserError("--retry-failed goes with --resume")
    if records_dir is not None and executor != "local":
        raise UserError("--records-dir is how a job on another host records its point; it goes with "
                        "--executor local")
    opts = RunOptions(db=db, resume=resume or executor == "slurm", retry_failed=retry_failed, force=force,
                      timeout_s=timeout, max_memory=max_memory, point=point, rdzv_endpoint=rdzv_endpoint,
                      node_rank=node_rank, records_dir=records_dir)
    if executor == "slurm" and not plan:
        _merge_finished_jobs(suite, slurm_dir, db)  # before planning: merged points are not submitted again
    the_plan = make_plan(suite, opts)
    if plan:
        _print_plan(the_plan, json_out, force)
        return
    db_path = None
    if records_dir is not None:  # a job on another host: the store is not touched
        _check_records_dir(records_dir)
    else:
        from llmdissect.results.store import check_writable

        db_path = check_writable(db)  # before anything runs
    if executor == "slurm":
        from llmdissect.suites.slurm import dispatch

        dispatch(the_plan, suite, db_path, opts, slurm_dir, slurm_opt, submit, json_out)
        return
    if not json_out:
        from llmdissect.suites.show import show_plan

        show_plan(the_plan, force)
    new = execute(the_plan, opts, db_path)
    if json_out:
        from llmdissect.console import print_json

        print_json(plan_record(the_plan, {r.config["suite_point"]: r for r in new}).to_dict())
    else:
        from llmdissect.suites.show import show_outcome

        show_outcome(the_plan, new, db_path, records_dir)
    raise typer.Exit(exit_code(the_plan, new))


def _check_records_dir(folder: Path) -> None:
    from llmdissect.errors import UserError

    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"cannot create --records-dir {folder}: {e.strerror}") from None


def _merge_finished_jobs(suite: str, slurm_dir: Optional[Path], db: DbPath) -> None:
    """Import the per-job record files of an earlier dispatch of this suite into the store."""
    from llmdissect.results.jobfiles import import_folder
    from llmdissect.results.store import open_store
    from llmdissect.suites.slurm import jobs_dir
    from llmdissect.suites.spec import load

    folder = jobs_dir(load(suite).name, slurm_dir)
    if folder.is_dir():
        with open_store(db) as store:
            import_folder(store, folder)


def _quick_plan(json_out: bool) -> None:
    """The quick suite's steps (it is a list of steps, not of grid points)."""
    from llmdissect.console import console, print_json, table
    from llmdissect.results.schema import RunRecord
    from llmdissect.suites.quick import quick_steps

    steps = quick_steps()
    if json_out:
        rec = RunRecord(kind=mn.PLAN, source="estimated", suite="quick", config={"suite": "quick"},
                        metrics={"steps": [{"name": s.name, "description": s.description} for s in steps],
                                 "total": len(steps)})
        print_json(rec.finish("ok").to_dict())
        return
    console.print(table(f"Suite quick: {len(steps)} steps", ["#", "step", "what"],
                        [(i + 1, s.name, s.description) for i, s in enumerate(steps)], justify_numbers=False))


def _print_plan(the_plan, json_out: bool, force: bool) -> None:
    if json_out:
        from llmdissect.console import print_json
        from llmdissect.suites.runner import plan_record

        print_json(plan_record(the_plan).to_dict())
        return
    from llmdissect.suites.show import show_plan

    show_plan(the_plan, force)


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    app.command("run")(run_suite)
    from llmdissect.cli import validate_cmd

    validate_cmd.register(app, bench_app)
