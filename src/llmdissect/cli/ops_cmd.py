"""`llmdissect bench ops`: every operator of a model's decoder layer at its real shapes,
against its roofline."""
from __future__ import annotations

from typing import Optional

import typer

import llmdissect.metric_names as mn
from llmdissect.cli.options import DbOpt, DbPath, JsonOpt


def show(record) -> None:
    from llmdissect.console import console, human_bytes, human_rate, human_seconds, note, table

    m, c = record.metrics, record.config
    ceil = m["ceilings"]
    rows = [(r["op"], r["pass"], r["shape"], r["dtype"], human_seconds(r[mn.TIME_S]["median"]),
             human_rate(r[mn.FLOPS], "FLOP").replace("/s", ""), human_bytes(r[mn.BYTES]), f"{r[mn.INTENSITY]:.3g}",
             human_rate(r[mn.FLOPS_PER_S], "FLOP/s"), human_rate(r[mn.BYTES_PER_S], "B/s"),
             f"{r[mn.PEAK_FRACTION]:.1%}", r["bound"]) for r in m["rows"]]
    console.print(table(f"ops {c['model']}: {c['tokens']} tokens, {c['dtype']}, pass {c['pass']} "
                        f"(time = median)", ["op", "pass", "shape", "dtype", "time", "FLOPs", "bytes", "FLOP/B",
                                             "FLOP/s", "bytes/s", "of roofline", "bound"], rows))
    peaks = ", ".join(f"{k} {human_rate(v, 'FLOP/s')}" for k, v in ceil["peak_flops_per_s"].items())
    console.print(f"ceilings: {peaks}; DRAM {human_rate(ceil['memory_bandwidth_bytes_per_s'], 'B/s')} "
                  f"({ceil['source']}); bandwidth ceiling per operator: copy rate at its working set")
    eff = m["efficiency"]
    console.print("efficiency (time-weighted): " + ", ".join(f"{k} {eff[k]:.1%}" for k in ("gemm", "attention",
                                                                                           "memory") if k in eff)
                  + "".join(f"; routed experts at {rows:g} tokens each {e:.1%}"
                            for rows, e in eff.get("experts_by_rows", []))
                  + ("; attention forward by length "
                     + ", ".join(f"s={s:g} {e:.1%}" for s, e in eff["attention_by_seq"])
                     if eff.get("attention_by_seq") else "")
                  + ("; element-wise by tokens " + ", ".join(f"{t:g} {e:.1%}" for t, e in eff["memory_by_tokens"])
                     if eff.get("memory_by_tokens") else ""))
    if ceil.get("raised"):
        note(f"{len(ceil['raised'])} row(s) beat a measured ceiling, which was raised to them (a noisy or "
             f"stale `peak`?): {ceil['raised'][0]}")
    for s in m.get("skipped") or []:
        note(f"skipped: {s}")
    if m.get("profile_path"):
        console.print(f"efficiencies stored in {m['profile_path']}")
    console.print(f"record {record.id} stored")


def ops(model: str = typer.Option("tiny-llama", "--model", help="Preset, model TOML, config.json or folder."),
        tokens: int = typer.Option(512, "--tokens", help="Tokens through the layer (batch x sequence); RMSNorm, "
                                  "RoPE and SwiGLU are also timed at a quarter and 8x it (at most 4096)."),
        passes: str = typer.Option("both", "--pass", help="fwd | bwd | both."),
        dtype: str = typer.Option("fp32", "--dtype", help="fp32 | bf16 | fp16."),
        seqs: Optional[str] = typer.Option(None, "--seqs", help="Attention sequence lengths, e.g. 128,512 "
                                                                 "(default: tokens/4, tokens/2, tokens)."),
        quant: bool = typer.Option(True, help="Include bitsandbytes/torchao quantize, dequantize and matmul."),
        min_time: float = typer.Option(0.2, "--min-time", help="Seconds each operator is timed for (at least 5 runs)."),
        device: str = typer.Option("auto", "--device", help="auto | cpu | cuda."),
        seed: int = typer.Option(0, "--seed"),
        profile: bool = typer.Option(True, help="Store per-class efficiencies in the calibration profile."),
        threads: Optional[int] = typer.Option(None, "--threads", help="Threads (default: usable cores)."),
        timeout: float = typer.Option(1800.0, "--timeout"),
        db: DbPath = DbOpt, json_out: bool = JsonOpt) -> None:
    """Time every operator of a model's decoder layer at its real shapes, against its roofline."""
    from llmdissect.cli.recording import finish
    from llmdissect.micro.ops_config import parse_ops_config
    from llmdissect.micro.ops_launch import run_ops
    from llmdissect.results.store import check_writable

    cfg = parse_ops_config(model=model, tokens=tokens, passes=passes, dtype=dtype, seqs=seqs, quant=quant,
                           min_time_s=min_time, device=device, seed=seed)
    db_path = check_writable(db)
    record, child = run_ops(cfg, progress=True, timeout_s=timeout, threads=threads, store_profile=profile)
    finish(record, db_path, json_out, show, user_error=child.user_error)


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    bench_app.command("ops")(ops)
