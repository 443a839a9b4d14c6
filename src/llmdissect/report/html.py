"""The HTML report: one self-contained file (inline SVG, inline CSS, no script, no fetch).

Jinja2 with autoescape on: every string from a record (model names, error text, labels)
is escaped. The only markup passed through unescaped is the SVG that matplotlib wrote,
which escapes its own text; `_safe_svg` checks it holds no script or external reference.
"""
from __future__ import annotations

import re

from markupsafe import Markup

from llmdissect.report.section import cell

_FORBIDDEN = re.compile(r"<script|<foreignObject|\bon[a-z]+\s*=|javascript:|(?:href|src)\s*=\s*\"(?!#)",
                        re.IGNORECASE)


def _safe_svg(svg: str) -> Markup:
    if _FORBIDDEN.search(svg):
        raise ValueError("plot SVG holds a script, event handler or external reference")
    # size from the page's CSS (the viewBox keeps the aspect), not matplotlib's inches
    svg = re.sub(r'<svg([^>]*?) width="[^"]+" height="[^"]+"', r'<svg\1 class="plot" role="img"', svg, count=1)
    return Markup(svg)


def _env():
    from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

    env = Environment(loader=PackageLoader("llmdissect.report", "templates"),
                      autoescape=select_autoescape(default=True, default_for_string=True),
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["cell"] = cell
    env.filters["svg"] = lambda plot: _safe_svg(plot.svg)
    return env


def render_html(report) -> str:
    return _env().get_template("report.html.j2").render(report=report)
