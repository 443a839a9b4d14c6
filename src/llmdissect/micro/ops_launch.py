"""`bench ops` end to end: the child times every case; the parent makes the `ops` record and
turns the rows into per-class efficiencies for the calibration profile."""
from __future__ import annotations

from typing import Any

from llmdissect.micro.ops_child import OpsConfig

TARGET = "llmdissect.micro.ops_launch:run"


def ceilings(cfg: OpsConfig, profile: dict[str, Any]) -> dict[str, Any]:
    """The peak FLOP/s of the dtype and the bandwidths: from the profile, else measured now."""
    import torch

    from llmdissect.micro import peak as pk

    dev = cfg.device
    name = "cpu" if dev == "cpu" else torch.cuda.get_device_name(dev)
    section = profile.get("cpu", {}) if dev == "cpu" else profile.get("gpus", {}).get(name, {})
    stored = section.get("peak_flops_per_s") or {}
    peaks = {d: stored[d] for d in {cfg.dtype, "fp32"} if stored.get(d)}
    dram = section.get("memory_bandwidth_bytes_per_s")
    source = "calibration profile (llmdissect peak)"
    if len(peaks) < len({cfg.dtype, "fp32"}) or not dram:
        source = "measured now, quickly (run `llmdissect peak` for the stored, longer measurement)"
        for d in {cfg.dtype, "fp32"} - set(peaks):
            sizes = {d: ((1024,) if d == "fp32" else (256,)) if dev == "cpu" else (4096,)}
            peaks[d] = max(r["flops_per_s"] for r in pk.matmul_rows(dev, sizes, 0.3))
        dram = dram or pk.copy_row(dev, (pk.COPY_BYTES_QUICK["cpu" if dev == "cpu" else "cuda"]), 0.3)["bytes_per_s"]
    from llmdissect.micro.ops_child import LADDER_BYTES

    ladder = [(float(r["bytes"]), r["bytes_per_s"]) for r in (pk.copy_row(dev, n, 0.05) for n in LADDER_BYTES)]
    if section.get("threads") and section["threads"] != torch.get_num_threads() and dev == "cpu":
        source += f"; measured with {section['threads']} threads, these operators with {torch.get_num_threads()}"
    return {"device_name": name, "peak_flops_per_s": {k: float(v) for k, v in peaks.items()},
            "memory_bandwidth_bytes_per_s": float(dram),
            "source": source, "cache_ladder": [{"bytes": b, "bytes_per_s": bw} for b, bw in ladder]}


def run(config: dict[str, Any]) -> dict[str, Any]:
    """Child entry: the rows of every case."""
    import torch

    from llmdissect.calibration_profile import load_profile
    from llmdissect.measure import LoopPolicy, Timer, measure_loop
    from llmdissect.measure.env import capture_device_env
    from llmdissect.micro.ops_child import build_cases, place_rows, raw_row
    from llmdissect.progress import report

    cfg = OpsConfig(**{k: v for k, v in config.items() if k in OpsConfig.model_fields})
    torch.manual_seed(cfg.seed)
    cases, skipped = build_cases(cfg)
    report(config, 0, len(cases) + 1, "ceilings")
    ceil = ceilings(cfg, load_profile())
    ladder = [(c["bytes"], c["bytes_per_s"]) for c in ceil["cache_ladder"]]
    sync = (lambda: torch.cuda.synchronize()) if cfg.device.startswith("cuda") else None
    policy = LoopPolicy(warmup=2, min_iters=5, min_time_s=cfg.min_time_s)
    rows = []
    for i, case in enumerate(cases):
        report(config, i + 1, len(cases) + 1, f"{case.op} {case.passes}")
        try:
            fn = case.make()
        except Exception as exc:  # a backend or library that cannot run these inputs here
            skipped.append(f"{case.op} {case.passes} {case.shape}: {type(exc).__name__}: {str(exc)[:160]}")
            continue
        stats = measure_loop(fn, policy, Timer(cfg.device, sync)).stats
        rows.append(raw_row(case, stats))
        del fn
    ceil["raised"] = place_rows(rows, ceil["peak_flops_per_s"], ladder, ceil["memory_bandwidth_bytes_per_s"])
    return {"metrics": {"rows": rows, "ceilings": ceil, "skipped": skipped,
                        "efficiency": efficiencies(rows, ceil)}, "env": capture_device_env()}


def _clamp(x: float) -> float:
    return min(1.0, max(1e-6, x))


def efficiencies(rows: list[dict[str, Any]], ceil: dict[str, Any]) -> dict[str, Any]:
    """Per roofline class against the measured ceilings, time-weighted (total work / total
    time / ceiling), as perfmodel reads them (`gemm`, `attention`, `memory`, fractions in (0, 1]); plus GEMMs by size.

    attention: per shape and pass the fastest fused (sdpa) backend, what dispatch would pick.
    memory: element-wise bytes against the DRAM bandwidth (capped at 1 where they ran from cache).
    """
    dram, peaks = ceil["memory_bandwidth_bytes_per_s"], ceil["peak_flops_per_s"]
    out: dict[str, Any] = {}
    gemm = [r for r in rows if r["class"] == "gemm"]
    if gemm:
        out["gemm"] = _clamp(sum(r["flops"] for r in gemm) / sum(r["time_s"]["median"] for r in gemm)
                             / peaks[gemm[0]["dtype"]])
        out["gemm_by_flops"] = sorted([r["flops"], _clamp(r["flops_per_s"] / peaks[r["dtype"]])] for r in gemm)
    best: dict[tuple[str, str], dict[str, Any]] = {}
    for r in rows:
        if r["class"] == "attention" and not r["op"].endswith("eager"):
            key = (r["shape"], r["pass"])
            if key not in best or r["time_s"]["median"] < best[key]["time_s"]["median"]:
                best[key] = r
    if best:
        att = list(best.values())
        out["attention"] = _clamp(sum(r["flops"] for r in att) / sum(r["time_s"]["median"] for r in att)
                                  / peaks[att[0]["dtype"]])
    mem = [r for r in rows if r["class"] == "memory"]
    if mem:
        out["memory"] = _clamp(sum(r["bytes"] for r in mem) / sum(r["time_s"]["median"] for r in mem) / dram)
    return out


def profile_update(record: Any) -> dict[str, Any]:
    """What a `bench ops` record adds to the calibration profile."""
    eff = record.metrics["efficiency"]
    scalar = {k: v for k, v in eff.items() if k in ("gemm", "attention", "memory")}
    detail = {"efficiency": scalar, "gemm_efficiency_by_flops": eff.get("gemm_by_flops", []),
              "efficiency_from": {"record_id": record.id, "model": record.config["model"],
                                  "tokens": record.config["tokens"], "dtype": record.config["dtype"]}}
    name = record.metrics["ceilings"]["device_name"]
    update: dict[str, Any] = {"efficiency": scalar}
    if record.config["device"] == "cpu":
        update["cpu"] = detail
    else:
        update["gpus"] = {name: detail}
    return update


def run_ops(cfg: OpsConfig, progress: bool = True, timeout_s: float = 1800, threads: int | None = None,
            store_profile: bool = True):
    from llmdissect.calibration_profile import update_profile
    from llmdissect.launch import run_child
    from llmdissect.measure.env import capture_env
    from llmdissect.progress import run_with_progress
    from llmdissect.results.recording import record_from_child
    from llmdissect.results.schema import utc_now

    config = {"what": "ops", **cfg.model_dump(), "pass": cfg.passes,
              "hardware": "cpu" if cfg.device == "cpu" else "cuda"}
    config.pop("passes")
    started = utc_now()
    child = run_with_progress(lambda c: run_child(TARGET, {**c, "passes": cfg.passes}, timeout_s=timeout_s,
                                                  threads=threads), config, "ops", progress)
    record = record_from_child("ops", config, child, capture_env(), started_at=started)
    if record.status == "ok" and store_profile and record.metrics["efficiency"]:
        record.metrics["profile_path"] = str(update_profile(profile_update(record)))
    return record, child
