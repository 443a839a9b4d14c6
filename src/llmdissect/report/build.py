"""Assemble a report: the sections that have records, then write HTML and Markdown."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llmdissect.analysis import findings
from llmdissect.analysis.compare import compare_rows, pair_records
from llmdissect.report import (
    sections_estimate,
    sections_infer,
    sections_micro,
    sections_repeats,
    sections_serving,
    sections_train,
)
from llmdissect.report.section import Section, Table
from llmdissect.results.schema import RunRecord, utc_now


@dataclass
class Report:
    title: str
    subtitle: str
    sections: list[Section]
    generated_at: str = field(default_factory=utc_now)


def build_sections(records: list[RunRecord], profile: dict[str, Any] | None = None,
                   estimate_missing: bool = True, runs: bool = False) -> list[Section]:
    """Every section whose records exist, in reading order (regressions of repeated points,
    then the environment); `runs`: also a row per run of every point."""
    profile = profile or {}
    builders = [
        lambda: sections_repeats.history(records),
        lambda: sections_micro.environment(records, profile),
        lambda: sections_train.ablations(records),
        lambda: sections_train.breakdown(records),
        lambda: sections_micro.operators(records, profile),
        lambda: sections_micro.collectives(records),
        lambda: sections_infer.inference(records),
        lambda: sections_infer.serving(records),
        lambda: sections_serving.capacity(records),
        lambda: sections_estimate.estimates(records, estimate_missing),
        lambda: sections_estimate.published(records),
        lambda: sections_micro.failures(records),
        lambda: sections_repeats.every_run(records) if runs else None,
    ]
    return [s for b in builders if (s := b()) is not None]


def compare_section(a: list[RunRecord], b: list[RunRecord], name_a: str, name_b: str) -> Section:
    """The same configurations of A and B side by side (analysis.compare)."""
    rows = compare_rows(pair_records(a, b))
    sec = Section("compare", f"Comparison: {name_a} against {name_b}",
                  "Configurations present on both sides; ratio = B / A; 'beyond noise' needs Mann-Whitney p < 0.05 "
                  "on the samples and non-overlapping bootstrap 95 % intervals of the medians.")
    sec.findings = findings.comparison(rows, name_a, name_b)
    sec.tables.append(Table("Side by side", ["configuration", "metric", "A", "B", "B / A", "p", "verdict"],
                            [(*r[:4], r[4] and f"{r[4]:.3f}x", r[5], r[6]) for r in rows]))
    return sec


def write_report(report: Report, out_dir: Path) -> tuple[Path, Path]:
    """report.html (self-contained) and report.md with plots/*.svg beside it."""
    from llmdissect.errors import UserError
    from llmdissect.report.html import render_html
    from llmdissect.report.markdown import render_markdown

    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        html_path = out_dir / "report.html"
        html_path.write_text(render_html(report), encoding="utf-8")
        md_path = out_dir / "report.md"
        md_path.write_text(render_markdown(report, out_dir), encoding="utf-8")
    except OSError as e:
        raise UserError(f"cannot write the report to {out_dir}: {e.strerror or e}") from None
    return html_path, md_path


def make_report(records: list[RunRecord], out_dir: Path, *, title: str, subtitle: str,
                extra: list[Section] | None = None, estimate_missing: bool = True,
                runs: bool = False) -> tuple[Path, Path]:
    from llmdissect.calibration_profile import load_profile

    try:
        profile = load_profile()
    except Exception:  # a broken profile must not stop a report of stored records
        profile = {}
    sections = build_sections(records, profile, estimate_missing, runs) + list(extra or [])
    return write_report(Report(title, subtitle, sections), out_dir)


def write_run_report(db_path: Path, ids: list[str], suite: str) -> Path:
    """The report of one suite run's records (the end of `run quick`), in a folder beside the
    database (`<db stem>-<suite>-report/`; for a server store, in the state folder); returns the
    path of report.html."""
    from llmdissect.paths import state_dir
    from llmdissect.report.select import select_points
    from llmdissect.results.location import server_url

    records, n_runs = select_points(db_path, ids=ids)
    beside = state_dir() / "results" if server_url(db_path) else Path(db_path)  # a server store: the state folder
    out = beside.parent / f"{beside.stem}-{suite}-report"
    html, _ = make_report(records, out, title=f"llm-dissect: {suite} suite",
                          subtitle=f"{n_runs} record(s) of this {suite} run ({len(records)} point(s)), "
                                   f"stored in {db_path}")
    return html
