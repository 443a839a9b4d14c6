"""Human output of `bench infer`: one point in detail, a grid as one table, and what the
hardware allows next to what was achieved."""
from __future__ import annotations

from typing import Any

import llmdissect.metric_names as mn
from llmdissect.console import console, human_bytes, human_rate, human_seconds, table


def _med(metrics: dict[str, Any], key: str) -> float | None:
    v = metrics.get(key)
    return v.get("median") if isinstance(v, dict) else v


def _pct(x: float | None) -> str:
    return f"{100 * x:.1f} %" if x is not None else "-"


def hardware_lines(metrics: dict[str, Any]) -> list[str]:
    """gpt-fast style: achieved, the ceiling, and the fraction (or why there is none)."""
    hw = metrics.get("hardware_allows") or {}
    source = hw.get("ceilings_source", "not measured")
    lines = []
    if hw.get("decode_bandwidth_bytes_per_s") is not None:
        ceiling = (f"of {human_rate(hw['memory_bandwidth_bytes_per_s'], 'B/s')} memory bandwidth "
                   f"({_pct(hw.get('decode_bandwidth_fraction'))})" if hw.get("memory_bandwidth_bytes_per_s")
                   else "memory bandwidth not measured")
        lines.append(f"Decode bandwidth achieved: {human_rate(hw['decode_bandwidth_bytes_per_s'], 'B/s')} "
                     f"({human_bytes(hw['decode_bytes_per_step'])} of weights + KV cache read per step); {ceiling}")
    peak = (f"of {human_rate(hw['peak_flops_per_s'], 'FLOP/s')} peak ({_pct(hw.get('prefill_peak_fraction'))})"
            if hw.get("peak_flops_per_s") else "peak FLOP/s not measured")
    lines.append(f"Prefill FLOP/s achieved: {human_rate(hw.get('prefill_flops_per_s'), 'FLOP/s')}; {peak}")
    lines.append(f"Ceilings: {source}")
    return lines


def show_point(record: Any) -> None:
    m, c = record.metrics, record.config
    rows = []
    for key, fmt in ((mn.TTFT_S, human_seconds), (mn.TPOT_S, human_seconds), (mn.E2E_LATENCY_S, human_seconds),
                     ("decode_step_s", human_seconds), (mn.PREFILL_TOKENS_PER_S, lambda v: f"{v:,.1f}"),
                     (mn.DECODE_TOKENS_PER_S, lambda v: f"{v:,.1f}")):
        s = m.get(key)
        if isinstance(s, dict):
            rows.append((key, fmt(s["median"]), fmt(s["p90"]), fmt(s["min"]), fmt(s["max"]), s["n"]))
    console.print(table(f"bench infer {c['model']} on {c['hardware']}: batch {c['batch']}, input {c['input_len']}, "
                        f"output {c['output_len']}, {c['dtype']}, {c['attn']}, {c['cache']} cache, quant {c['quant']}"
                        f"{', compiled' if c.get('compile') else ''} (run {record.id})",
                        ["metric", "median", "p90", "min", "max", "n"], rows))
    cons = m.get("consistency") or {}
    if cons:
        console.print(f"Check: ttft + (out-1) x step = {human_seconds(cons['predicted_e2e_s'])} vs e2e "
                      f"{human_seconds(cons['e2e_s'])} ({100 * cons['relative_error']:.1f} % apart; "
                      f"{'ok' if cons['ok'] else 'MORE THAN 10 % - per-token timing is off'})")
    console.print(f"First call: {human_seconds(m.get('first_call_s'))} "
                  f"(ttft {human_seconds(m.get('first_call_ttft_s'))}); "
                  f"build {human_seconds(m.get('build_s'))}, quantize {human_seconds(m.get('quantize_s'))}")
    console.print(f"Memory: weights {human_bytes(m.get('weights_bytes'))}, "
                  f"KV cache {human_bytes(m.get(mn.KV_CACHE_BYTES))} "
                  f"({m.get('kv_cache_positions')} positions), peak {human_bytes(m.get(mn.PEAK_MEMORY_BYTES))} "
                  f"({m.get('peak_memory_scope')}), peak RSS {human_bytes(m.get(mn.PEAK_RSS_BYTES))}")
    for line in hardware_lines(m):
        console.print(line)
    if m.get(mn.USD_PER_MILLION_OUTPUT_TOKENS) is not None:
        console.print(f"Cost at {m['usd_per_hour']:g} USD/hour ({m['usd_per_hour_source']}): "
                      f"{m.get(mn.USD_PER_MILLION_INPUT_TOKENS) or 0:.4g} USD per million input tokens at the "
                      f"prefill rate, {m[mn.USD_PER_MILLION_OUTPUT_TOKENS]:.4g} per million output tokens at the "
                      f"decode rate")
    if m.get(mn.ENERGY_J) is not None:
        console.print(f"Energy: {m[mn.ENERGY_J]:.4g} J over the timed calls ({'+'.join(m['energy_sources'])}), "
                      f"{m.get(mn.ENERGY_J_PER_OUTPUT_TOKEN) or 0:.4g} J per output token")
    elif m.get("energy_not_measured"):
        console.print(f"Energy: not measured ({m['energy_not_measured']})")


def grid_table(records: list[Any]):
    rows = []
    for r in records:
        c, m = r.config, r.metrics
        hw = m.get("hardware_allows") or {}
        ok = r.status == "ok"
        rows.append((c["quant"], c["cache"], c["batch"], c["input_len"], c["output_len"], r.status,
                     human_seconds(_med(m, mn.TTFT_S)) if ok else "-", human_seconds(_med(m, mn.TPOT_S)) if ok else "-",
                     f"{_med(m, mn.PREFILL_TOKENS_PER_S):,.0f}" if ok else "-",
                     f"{_med(m, mn.DECODE_TOKENS_PER_S):,.1f}" if ok and _med(m, mn.DECODE_TOKENS_PER_S) else "-",
                     human_bytes(m.get(mn.KV_CACHE_BYTES)) if ok else "-",
                     human_bytes(m.get("weights_bytes")) if ok else "-",
                     human_rate(hw.get("decode_bandwidth_bytes_per_s"), "B/s") if ok else "-",
                     _pct(hw.get("decode_bandwidth_fraction")) if ok else "-"))
    first = records[0].config
    return table(f"bench infer {first['model']} on {first['hardware']} ({first['dtype']}, {first['attn']}; "
                 "medians; bw = decode bandwidth achieved, % of memory bandwidth where measured)",
                 ["quant", "cache", "batch", "in", "out", "status", "ttft", "tpot", "prefill tok/s", "decode tok/s",
                  "kv cache", "weights", "bw", "bw %"], rows)
