"""Quick-suite steps of the micro half: `peak` (quick variant, stored in the calibration
profile so that later training steps report MFU), a tiny-llama `bench ops` (its per-class
and by-size efficiencies stored there too, for the estimates `validate` makes) and a tiny-llama
`dissect pretrain`."""
from __future__ import annotations

import llmdissect.metric_names as mn
from llmdissect.suites.quick import QuickContext, QuickStep

SEQS = [32, 64, 128, 256]
"""The attention's sequence lengths: the quick suite's prompts (32, 128 tokens) and training
sequences (128) lie inside, so the forward efficiency by length is read, not extrapolated."""


def _check(ctx: QuickContext, record) -> None:
    ctx.save(record)
    if record.status != "ok":
        from rich.markup import escape

        raise RuntimeError(escape(f"{record.config.get('what')} run {record.id} ended {record.status}: {record.error}"))


def _peak(ctx: QuickContext) -> None:
    from llmdissect.micro.peak_launch import run_peak

    # the serving engine's own cost too: the serve step's simulation adds it to every iteration
    record, _ = run_peak(quick=True, devices=None, min_time_s=0.2, progress=False, timeout_s=120, serve_engine=True)
    _check(ctx, record)
    cpu = record.metrics["devices"]["cpu"]
    theory = (cpu.get("theoretical_peak_flops_per_s") or {}).get("fp32")
    ctx.log(f"peak: fp32 {cpu['peak_flops_per_s']['fp32'] / 1e9:.1f} GFLOP/s"
            + (f" ({cpu['peak_flops_per_s']['fp32'] / theory:.0%} of theoretical {theory / 1e9:.0f})"
               if theory else "")
            + (f", raised from {cpu['peak_raised']['matmul_rows'] / 1e9:.1f} by the GEMM grid"
               if cpu.get("peak_raised") else "")
            + f", copy {cpu['memory_bandwidth_bytes_per_s'] / 1e9:.1f} GB/s; "
            f"stored in {record.metrics['profile_path']}")


def _ops(ctx: QuickContext) -> None:
    from llmdissect.micro.ops_config import OpsConfig
    from llmdissect.micro.ops_launch import run_ops

    cfg = OpsConfig(model="tiny-llama", tokens=64, passes="both", min_time_s=0.01, seqs=SEQS, quant=False,
                    device="cpu")
    # its efficiencies (per class and GEMMs by size) go into the profile, which the estimates read
    record, _ = run_ops(cfg, progress=False, timeout_s=120, store_profile=True)
    _check(ctx, record)
    m = record.metrics
    slowest = max(m["rows"], key=lambda r: r[mn.TIME_S]["median"])
    ctx.log(f"ops: {len(m['rows'])} rows; efficiency " + ", ".join(f"{k} {v:.0%}" for k, v in m["efficiency"].items()
                                                                  if not isinstance(v, list))
            + f"; slowest {slowest['op']} {slowest['pass']} {slowest[mn.TIME_S]['median'] * 1e3:.2f} ms")


def _dissect(ctx: QuickContext) -> None:
    from llmdissect.launch import run_child
    from llmdissect.measure.env import capture_env
    from llmdissect.results.recording import record_from_child
    from llmdissect.workloads.train_config import record_config
    from llmdissect.workloads.train_launch import prepare

    cfg = prepare(mn.PRETRAIN, model="tiny-llama", seq=64, micro_batch=1, steps=1, warmup=1, device="cpu")
    child = run_child("llmdissect.workloads.dissect_train_child:run", {"train": cfg.model_dump(), "profile_steps": 1,
                                                           "trace": None}, timeout_s=120)
    record = record_from_child(mn.OPS, {"what": "dissect", "workload": mn.PRETRAIN, **record_config(cfg),
                                       "profile_steps": 1}, child, capture_env())
    _check(ctx, record)
    m = record.metrics
    top = sorted(((k, v) for k, v in m["modules_share"].items()), key=lambda kv: -kv[1])[:3]
    ctx.log("dissect pretrain: " + ", ".join(f"{k} {v:.0%}" for k, v in top)
            + f"; profiling overhead {m['profiling_overhead']:+.0%}")


def quick_steps() -> list[QuickStep]:
    return [QuickStep("peak", "matmul FLOP/s and copy bandwidth (quick), stored in the calibration profile", _peak),
            QuickStep("ops", "tiny-llama decoder-layer operators, 64 tokens, fwd and bwd; efficiencies stored in the "
                                 "calibration profile", _ops),
            QuickStep("dissect-pretrain", "tiny-llama pre-training step under torch.profiler", _dissect)]
