"""The Markdown report: text and tables in report.md, each plot a file in plots/ beside it."""
from __future__ import annotations

from pathlib import Path

from llmdissect.report.section import cell


def _md(text: object) -> str:
    """A table cell or line of Markdown text: pipes, angle brackets and newlines made harmless."""
    s = str(text).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")
    return s.replace("<", "&lt;")  # no raw HTML from records; '->' stays readable


def render_markdown(report, out_dir: Path) -> str:
    plot_dir = out_dir / "plots"
    plot_dir.mkdir(exist_ok=True)
    lines = [f"# {_md(report.title)}", "", f"{_md(report.subtitle)}  ", f"Generated {report.generated_at[:19]} UTC.",
             ""]
    lines += ["Sections: " + ", ".join(f"[{_md(s.title)}](#{s.id})" for s in report.sections), ""]
    for s in report.sections:
        lines += [f'<a id="{s.id}"></a>', "", f"## {_md(s.title)}", ""]
        if s.intro:
            lines += [_md(s.intro), ""]
        if s.findings:
            lines += ["**Findings**", ""] + [f"- {_md(f)}" for f in s.findings] + [""]
        for p in s.plots:
            (plot_dir / f"{p.name}.svg").write_text(
                '<?xml version="1.0" encoding="utf-8" standalone="no"?>\n' + p.svg, encoding="utf-8")
            lines += [f"![{_md(p.title)}](plots/{p.name}.svg)", ""]
        for t in s.tables:
            lines += [f"**{_md(t.title)}**", "", "| " + " | ".join(_md(c) for c in t.columns) + " |",
                      "|" + "---|" * len(t.columns)]
            lines += ["| " + " | ".join(_md(cell(v)) for v in row) + " |" for row in t.rows]
            lines.append("")
    return "\n".join(lines)
