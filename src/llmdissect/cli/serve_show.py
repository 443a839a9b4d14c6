"""Human output of `bench serve`: one run's latency table and throughput line, and a capacity
search's probes and verdict."""
from __future__ import annotations

import llmdissect.metric_names as mn
from llmdissect.console import console, human_seconds, table


def _count(config: dict) -> str:
    turns = config.get("turns") or 1
    if turns > 1:
        return f"{config.get('num_prompts')} sessions of {turns} turns"
    return f"{config.get('num_prompts')} requests" + (f" from trace {config['trace']}" if config.get("trace") else "")


def show_run(record) -> None:
    m = record.metrics
    rows = []
    for key in (mn.TTFT_S, mn.TPOT_S, mn.ITL_S, mn.E2E_LATENCY_S):
        s = m.get(key)
        rows.append((key, *((human_seconds(s[q]) for q in ("mean", "median", "p90", "p99")) if s else "----")))
    rate = record.config.get("request_rate")
    console.print(f"serve {record.id}: {record.config.get('model')} /v1/{record.config.get('endpoint')} "
                  f"({'streamed' if record.config.get('stream') else 'not streamed'}), rate {rate}/s, "
                  f"concurrency {record.config.get('max_concurrency') or 'unlimited'}, "
                  f"{_count(record.config)}")
    console.print(table(None, ["metric", "mean", "median", "p90", "p99"], rows))
    good = f", goodput {m[mn.GOODPUT_PER_S]:.3g} req/s" if m.get(mn.GOODPUT_PER_S) is not None else ""
    console.print(f"completed {m['completed']}, failed {m['failed']} in {m[mn.DURATION_S]:.2f} s: "
                  f"{m[mn.REQUEST_THROUGHPUT_PER_S]:.3g} req/s, {m[mn.OUTPUT_TOKENS_PER_S]:.4g} output tok/s, "
                  f"{m[mn.TOTAL_TOKENS_PER_S]:.4g} total tok/s{good}; realised rate "
                  f"{m['request_rate_realised_per_s'] or 0:.3g} req/s; client CPU "
                  f"{m['client_cpu_s_per_request'] * 1e3:.2f} ms/request; output tokens by {m['output_tokens_source']}")
    if m.get("output_len_mismatched"):
        console.print(f"note: {m['output_len_mismatched']} request(s) got another output length than asked "
                      f"(server cannot fix it: {not record.config.get('fixed_output_len')})")
    if m.get(mn.PREFIX_CACHE_HIT_RATE) is not None:
        console.print(f"prefix cache hit rate {100 * m[mn.PREFIX_CACHE_HIT_RATE]:.1f} % (server's usage)")
    elif record.config.get("shared_prefixes") or (record.config.get("turns") or 1) > 1:
        console.print("prefix cache hit rate: not reported by the server (no cached_tokens in usage)")

    server = record.env.get("server") or {}
    if server.get("engine"):
        cache = server.get("cache_config") or {}
        kv = (f" (KV blocks of {cache['block_size']} tokens, {cache.get('num_gpu_blocks', '?')} blocks, "
              f"prefix caching {cache.get('enable_prefix_caching', '?')})") if cache.get("block_size") else ""
        console.print(f"server: {server['engine']} {server.get('version', '')}".rstrip() + kv)
    sm = m.get(mn.SERVER_METRICS)
    if sm:
        hit = sm.get("prefix_cache_hit_rate")
        console.print(f"server metrics ({len(sm['t_s'])} scrapes, every {sm['interval_s']:g} s): up to "
                      f"{sm.get('running_max', 0):g} running and {sm.get('waiting_max', 0):g} waiting, KV cache up to "
                      f"{100 * sm.get('kv_cache_use_max', 0):.1f} %, {sm.get('preemptions_during_run', 0):g} "
                      f"preemptions" + (f", prefix-cache hits {100 * hit:.1f} % of prompt tokens" if hit is not None
                                        else "")
                      + (f", {sm['mean_tokens_per_iteration']:.1f} tokens per iteration"
                         if sm.get("mean_tokens_per_iteration") else ""))
    elif m.get(mn.SERVER_METRICS_NOT_AVAILABLE):
        console.print(f"server metrics: not available ({m[mn.SERVER_METRICS_NOT_AVAILABLE]})")
    if m.get(mn.USD_PER_MILLION_OUTPUT_TOKENS) is not None:
        console.print(f"cost at {m['usd_per_hour']:g} USD/hour: {m[mn.USD_PER_MILLION_INPUT_TOKENS]:.4g} USD per "
                      f"million input tokens, {m[mn.USD_PER_MILLION_OUTPUT_TOKENS]:.4g} USD per million output "
                      f"tokens (each charged the whole run)")
    if m.get(mn.ENERGY_J) is not None:
        per = m.get(mn.ENERGY_J_PER_OUTPUT_TOKEN)
        console.print(f"energy {m[mn.ENERGY_J]:.4g} J ({'+'.join(m['energy_sources'])}, this machine)"
                      + (f", {per:.4g} J per output token" if per is not None else ""))
    elif m.get("energy_not_measured"):
        console.print(f"energy: not measured ({m['energy_not_measured']})")


def show_capacity(record) -> None:
    """Every probe in the order run, then the verdict."""
    search = record.metrics["capacity_search"]
    unit = "req/s" if search["over"] == "rate" else "in flight"
    rows = []
    for p in search["probes"]:
        steady = ", ".join(f"{k} {human_seconds(v) if v is not None else '-'}" for k, v in p["steady"].items())
        rows.append((f"{p['value']:.4g} {unit}", "meets" if p["passed"] else "misses", steady,
                     f"{p.get(mn.REQUEST_THROUGHPUT_PER_S) or 0:.3g}", p["why"] or ""))
    console.print(f"capacity search {record.id}: {record.config.get('model')}, SLO {search['slo_text']}, "
                  f"{record.config.get('num_prompts')} requests per probe, "
                  f"{record.config['capacity_search']['warmup_requests']} warm-up")
    console.print(table(None, [search["over"], "SLO", "steady statistics", "req/s", "why not"], rows))
    close = "" if search["converged"] else " (not converged within --max-probes)"
    console.print(f"capacity: {search['capacity']:.4g} {unit} meets the SLO; {search['first_failing']:.4g} {unit} "
                  f"does not{close}")
