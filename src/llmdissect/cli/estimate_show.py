"""Human output of an estimate: the breakdown table, the verdict, the assumptions."""
from __future__ import annotations

from llmdissect.cli.output import console, human_bytes, human_count, human_rate, human_seconds, table

MEMORY_ROWS = ("params_bytes", "grads_bytes", "optimizer_bytes", "activations_bytes", "kv_cache_bytes",
               "step_peak_bytes", "other_bytes", "total_bytes", "host_total_bytes")


def show_estimate(est, record_id: str | None) -> None:
    m, c = est.metrics, est.config
    title = (f"Estimate: {est.kind} {c['model']} on {c['hardware']} ({c['dtype']}"
             + (f", ZeRO-{c['zero']}, offload {c['offload']}, recompute {c['recompute']}" if "zero" in c else "")
             + f", attn {c['attn']}, tp {c['tp']}" + (f", pp {c['pp']}" if "pp" in c else "") + ")")
    rows = [(f"memory.{k}", human_bytes(m["memory"][k])) for k in MEMORY_ROWS if k in m["memory"]]
    for k, v in (m.get("time") or {}).items():
        rows.append((f"time.{k}", human_seconds(v)))
    if m.get("tokens_per_s") is not None:
        rows.append(("tokens_per_s", human_rate(m["tokens_per_s"], "tok/s")))
    for key in ("prefill_tokens_per_s", "decode_tokens_per_s"):
        if m.get(key) is not None:
            rows.append((key, human_rate(m[key], "tok/s")))
    if m.get("mfu") is not None:
        rows.append(("mfu", f"{m['mfu']:.1%}"))
    if m.get("model_flops_per_token") is not None:
        rows.append(("model_flops_per_token", human_count(m["model_flops_per_token"])))
    if "max_batch" in m:
        rows.append(("max_batch (KV capacity)", str(m["max_batch"])))
    console.print(title)
    console.print(table(None, ["quantity", "per device"], rows))
    console.print(("[green]" if est.fits else "[red]") + est.verdict() + ("[/]"))
    for n in est.notes:
        console.print(f"  - {n}", markup=False)
    if record_id:
        console.print(f"stored as {record_id} (source: estimated)")
