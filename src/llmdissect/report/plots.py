"""Plots for reports: matplotlib figures rendered to SVG text (inline in HTML, files beside Markdown).

Every plot has a title, axis labels with units and a legend; each of these carries an SVG
id (`<name>-title`, `<name>-xlabel`, `<name>-ylabel`, `<name>-legend`) so tests and readers
can find them. Text stays text in the SVG (`svg.fonttype = none`), and matplotlib escapes
it, so a name taken from a record never becomes markup.
"""
from __future__ import annotations

import io
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass

COLORS = ["#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860", "#DA8BC3", "#8C8C8C",
          "#CCB974", "#64B5CD"]


@dataclass(frozen=True)
class Plot:
    name: str
    """File-safe identifier, unique within a report (also the SVG id prefix)."""
    title: str
    svg: str


def _wrap(label: str, width: int) -> str:
    return "\n".join(textwrap.wrap(str(label), width, break_long_words=True)) or str(label)


def _bytes_axis(ax) -> None:
    """Tick labels of a bytes axis in binary units (1 KiB, 64 MiB)."""
    from matplotlib.ticker import FuncFormatter

    def fmt(v, _pos):
        for unit in ("B", "KiB", "MiB", "GiB"):
            if v < 1024:
                return f"{v:g} {unit}"
            v /= 1024
        return f"{v:g} TiB"

    ax.xaxis.set_major_formatter(FuncFormatter(fmt))


def _plt():
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt


def _figure(name: str, width: float = 7.0, height: float = 3.6):
    plt = _plt()
    plt.rcParams.update({"svg.fonttype": "none", "svg.hashsalt": name, "font.size": 9,
                         "axes.spines.top": False, "axes.spines.right": False})
    fig, ax = plt.subplots(figsize=(width, height))
    return fig, ax


def _finish(fig, ax, name: str, title: str, xlabel: str, ylabel: str, legend_title: str | None = None) -> Plot:
    """Title, labels and legend (with ids), then the figure as SVG text without the XML prolog."""
    plt = _plt()
    ax.set_title(title, loc="left", fontsize=10, fontweight="bold").set_gid(f"{name}-title")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.xaxis.label.set_gid(f"{name}-xlabel")
    ax.yaxis.label.set_gid(f"{name}-ylabel")
    ax.grid(True, which="major", alpha=0.25)
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        legend = ax.legend(title=legend_title, fontsize=8, title_fontsize=8, frameon=False,
                           loc="upper left", bbox_to_anchor=(1.01, 1.0))
        legend.set_gid(f"{name}-legend")
    fig.tight_layout()
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
    plt.close(fig)
    svg = buf.getvalue()
    svg = svg[svg.index("<svg"):]  # drop <?xml ...?> and DOCTYPE: the SVG goes inline
    return Plot(name, title, svg)


def bars(name: str, title: str, labels: Sequence[str], series: dict[str, Sequence[float | None]], *,
         ylabel: str, xlabel: str, errors: dict[str, Sequence[tuple[float, float] | None]] | None = None,
         legend_title: str | None = None) -> Plot:
    """Grouped vertical bars: one group per label, one bar per series; errors are (low, high)."""
    import numpy as np

    width_chars = max(10, 60 // max(1, len(labels)))
    labels = [_wrap(label, width_chars) for label in labels]
    fig, ax = _figure(name, height=3.2 + 0.16 * max(label.count("\n") for label in labels))
    x = np.arange(len(labels))
    width = 0.8 / max(1, len(series))
    for i, (sname, values) in enumerate(series.items()):
        vals = [v if v is not None else 0.0 for v in values]
        pos = x - 0.4 + width * (i + 0.5)
        err = None
        if errors and errors.get(sname):
            err = np.array([[max(0.0, v - e[0]) if e else 0.0 for v, e in zip(vals, errors[sname])],
                            [max(0.0, e[1] - v) if e else 0.0 for v, e in zip(vals, errors[sname])]])
        ax.bar(pos, vals, width * 0.92, label=sname, color=COLORS[i % len(COLORS)], yerr=err, capsize=3,
               error_kw={"elinewidth": 0.8, "ecolor": "#333"})
    ax.set_xticks(x, labels, fontsize=8)
    return _finish(fig, ax, name, title, xlabel, ylabel, legend_title)


def stacked(name: str, title: str, labels: Sequence[str], parts: dict[str, Sequence[float]], *,
            ylabel: str, xlabel: str, legend_title: str | None = None) -> Plot:
    """Horizontal stacked bars: one bar per label, one segment per part."""
    import numpy as np

    labels = [_wrap(label, 34) for label in labels]
    fig, ax = _figure(name, width=7.5, height=max(1.5 + 0.45 * len(labels), 0.8 + 0.2 * len(parts)))
    y = np.arange(len(labels))
    left = np.zeros(len(labels))
    for i, (pname, values) in enumerate(parts.items()):
        vals = np.array([v or 0.0 for v in values], dtype=float)
        ax.barh(y, vals, 0.6, left=left, label=pname, color=COLORS[i % len(COLORS)])
        left += vals
    ax.set_yticks(y, labels, fontsize=7.5)
    ax.invert_yaxis()
    return _finish(fig, ax, name, title, xlabel, ylabel, legend_title)


def lines(name: str, title: str, series: dict[str, tuple[Sequence[float], Sequence[float]]], *, xlabel: str,
          ylabel: str, logx: bool = False, logy: bool = False, legend_title: str | None = None,
          markers_only: bool = False, bytes_x: bool = False) -> Plot:
    """One line (or marker set) per series of (x values, y values)."""
    fig, ax = _figure(name)
    for i, (sname, (xs, ys)) in enumerate(series.items()):
        pts = sorted((x, y) for x, y in zip(xs, ys) if x is not None and y is not None)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "o" if markers_only else "o-", ms=4, lw=1.4,
                label=sname, color=COLORS[i % len(COLORS)])
    if logx:
        ax.set_xscale("log", base=2 if not markers_only else 10)
    if logy:
        ax.set_yscale("log")
    if bytes_x:
        _bytes_axis(ax)
    return _finish(fig, ax, name, title, xlabel, ylabel, legend_title)


def versus(name: str, title: str, points: dict[str, tuple[Sequence[float], Sequence[float]]], *, xlabel: str,
           ylabel: str) -> Plot:
    """Estimated (y) against measured (x) on log axes, with the ideal line y = x."""
    fig, ax = _figure(name, width=5.6, height=4.2)
    allv = [v for xs, ys in points.values() for v in (*xs, *ys) if v and v > 0]
    lo, hi = min(allv) / 1.5, max(allv) * 1.5
    ax.plot([lo, hi], [lo, hi], "--", color="#888", lw=1, label="ideal (estimate = measurement)")
    for i, (sname, (xs, ys)) in enumerate(points.items()):
        ax.plot(xs, ys, "o", ms=6, label=sname, color=COLORS[i % len(COLORS)])
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    return _finish(fig, ax, name, title, xlabel, ylabel, "metric")


def roofline(name: str, title: str, ceilings: dict[str, tuple[float, float]],
             points: dict[str, tuple[Sequence[float], Sequence[float]]]) -> Plot:
    """Log-log roofline: per dtype min(peak FLOP/s, intensity x bandwidth), operator points on it.

    `ceilings`: dtype -> (peak FLOP/s, bandwidth bytes/s); `points`: series -> (intensity, FLOP/s).
    """
    import numpy as np

    fig, ax = _figure(name, height=4.0)
    xs_all = [x for xs, _ in points.values() for x in xs if x and x > 0] or [1.0]
    x = np.logspace(np.log10(min(xs_all) / 4), np.log10(max(xs_all) * 4), 200)
    for i, (dtype, (peak, bw)) in enumerate(ceilings.items()):
        ax.plot(x, np.minimum(peak, x * bw), "-", color="#444", lw=1.2 + 0.4 * (i == 0), alpha=0.5 + 0.5 * (i == 0),
                label=f"ceiling {dtype}: {peak / 1e9:.3g} GFLOP/s, {bw / 1e9:.3g} GB/s")
    for i, (sname, (xs, ys)) in enumerate(points.items()):
        ax.plot(xs, ys, "o", ms=5, label=sname, color=COLORS[i % len(COLORS)])
    ax.set_xscale("log")
    ax.set_yscale("log")
    return _finish(fig, ax, name, title, "arithmetic intensity (FLOP/byte)", "achieved (FLOP/s)", "operator")


def small_multiples(name: str, title: str, panels: dict[str, tuple[Sequence[float], Sequence[float]]], *,
                    xlabel: str, ylabel: str, columns: int = 4,
                    marks: dict[str, Sequence[float]] | None = None) -> Plot:
    """One small panel per series of (x, y), own y scale each: a metric's trend per point;
    `marks`: x positions drawn as thin vertical lines in a panel (where the git revision changed)."""
    plt = _plt()
    rows = -(-len(panels) // columns)
    plt.rcParams.update({"svg.fonttype": "none", "svg.hashsalt": name, "font.size": 7})
    fig, axes = plt.subplots(rows, columns, figsize=(8.0, 0.4 + 1.5 * rows), squeeze=False)
    for ax, (label, (xs, ys)) in zip(axes.flat, panels.items()):
        ax.plot(xs, ys, ".-", ms=3, lw=0.8, color=COLORS[0])
        for x in (marks or {}).get(label, []):
            ax.axvline(x, color="#999", lw=0.6, ls="--")
        ax.set_title(_wrap(label, 40), fontsize=6.5, loc="left")
        ax.tick_params(labelsize=6)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    fig.suptitle(title, x=0.01, ha="left", fontsize=10, fontweight="bold").set_gid(f"{name}-title")
    fig.supxlabel(xlabel, fontsize=8).set_gid(f"{name}-xlabel")
    fig.supylabel(ylabel, fontsize=8).set_gid(f"{name}-ylabel")
    fig.tight_layout()
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
    plt.close(fig)
    svg = buf.getvalue()
    return Plot(name, title, svg[svg.index("<svg"):])
