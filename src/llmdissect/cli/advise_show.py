"""Human output of `advise`: what was searched, the Pareto front, the best, the near misses."""
from __future__ import annotations

from llmdissect.cli.output import console, human_bytes, human_rate, human_seconds, table

RESULT_KEYS = ("total_bytes", "host_bytes", "tokens_per_s", "step_s", "ttft_s", "tpot_s", "mfu",
               "fits_device", "fits_host", "fits", "why")


def _rows(items: list[dict]) -> tuple[list[str], list[list[str]]]:
    if not items:
        return [], []
    knobs = [k for k in items[0] if k not in RESULT_KEYS]
    time_key = "tpot_s" if "tpot_s" in items[0] else "step_s"
    cols = knobs + ["memory/device", "tokens/s", time_key, "mfu"] + (["why"] if "why" in items[0] else [])
    out = []
    for it in items:
        row = [str(it[k]) for k in knobs] + [human_bytes(it["total_bytes"]), human_rate(it["tokens_per_s"], "tok/s"),
                                             human_seconds(it[time_key]), f"{it['mfu']:.1%}"]
        if "why" in it:
            row.append(it["why"])
        out.append(row)
    return cols, out


def show_advice(kind: str, config: dict, goal: str, summary: dict, rows: dict) -> None:
    rate = f" ({summary['configs_per_s']:.3g}/s)" if summary["evaluated"] >= 5000 else ""  # small grids: fixed cost
    console.print(f"Advice: {kind} {config['model']} on {config['hardware']} ({config['dtype']}): "
                  f"{summary['evaluated']} configurations in {summary['search_s'] * 1e3:.0f} ms{rate}; "
                  f"{summary['fitting']} fit, "
                  f"{summary['dropped_device_memory']} need more device memory, "
                  f"{summary['dropped_host_memory']} more host memory")
    if not rows["top"]:
        console.print("[red]no configuration fits[/]; the closest ones:")
    for title, key in (("Pareto front: throughput vs memory per device", "front"),
                       (f"Best for {goal}", "top"), ("Fastest that do not fit, and why", "dropped_best")):
        cols, body = _rows(rows[key])
        if body:
            console.print(table(title, cols, body))
