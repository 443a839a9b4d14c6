"""`peak`, the parent side: the child (`peak_child.run`) measures every device; this makes
the record and writes the calibration profile (`cpu` and `gpus.<device name>` sections)."""
from __future__ import annotations

from typing import Any

import llmdissect.metric_names as mn
from llmdissect.perfmodel.ceilings import FIXED_COST_KEYS, MEASURED_RATE_KEYS

TARGET = "llmdissect.micro.peak_child:run"


def visible_devices() -> list[str]:
    """cpu, then each visible CUDA device (nvidia-smi is asked first: no torch import on CPU-only machines)."""
    from llmdissect.measure.env import nvidia_smi

    devices = ["cpu"]
    if nvidia_smi():
        import torch

        devices += [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    return devices


def add_catalogue(metrics: dict[str, Any]) -> None:
    """Next to each measured GPU, its catalogued peaks (specs.hardware.match_gpu)."""
    from llmdissect.specs.hardware import match_gpu

    for entry in metrics["devices"].values():
        if entry["device"] != "cpu":
            spec = match_gpu(entry["name"])
            entry["catalogued"] = None if spec is None else {
                "name": spec.name, "peak_flops_per_s": spec.peak_flops_per_s,
                "memory_bandwidth_bytes_per_s": spec.memory_bandwidth_bytes_per_s, "source_url": spec.source_url}


def profile_update(metrics: dict[str, Any], record_id: str | None = None) -> dict[str, Any]:
    """The calibration profile's `cpu` and `gpus` sections from a peak run."""
    update: dict[str, Any] = {}
    for entry in metrics["devices"].values():
        section = {"peak_flops_per_s": entry["peak_flops_per_s"],
                   "memory_bandwidth_bytes_per_s": entry["memory_bandwidth_bytes_per_s"], "record_id": record_id,
                   "threads": metrics.get("threads")}
        for key in FIXED_COST_KEYS + MEASURED_RATE_KEYS:  # fixed costs (micro.overhead), AdamW's rates
            if (entry.get("overheads") or {}).get(key) is not None:
                section[key] = entry["overheads"][key]
        if entry.get("gemm_grid"):
            section["gemm_efficiency_by_shape"] = entry["gemm_grid"]
        if entry.get("gemm_grid_one_thread"):
            section["gemm_efficiency_by_shape_one_thread"] = entry["gemm_grid_one_thread"]
        if entry.get("memory_bandwidth_one_thread_bytes_per_s"):
            section["memory_bandwidth_one_thread_bytes_per_s"] = entry["memory_bandwidth_one_thread_bytes_per_s"]
        if entry["device"] == "cpu":
            from llmdissect.specs.hardware import last_level_cache_bytes

            section["theoretical_peak_flops_per_s"] = entry.get("theoretical_peak_flops_per_s", {})
            cache = last_level_cache_bytes()
            if cache:
                section["last_level_cache_bytes"] = cache
            update["cpu"] = section
        else:
            update.setdefault("gpus", {})[entry["name"]] = section
            if entry.get("catalogued"):
                update["gpus"][entry["catalogued"]["name"]] = section
    return update


def run_peak(quick: bool = False, devices: list[str] | None = None, min_time_s: float | None = None,
             progress: bool = True, timeout_s: float = 600, store_profile: bool = True,
             threads: int | None = None, serve_engine: bool | None = None):
    """Measure, make the `ops` record (config.what = peak), write the profile. Returns (record, child).
    `serve_engine`: also time transformers' serving engine on a CPU (micro.serve_engine, ~5 s;
    default: a full run does, a quick one does not)."""
    from llmdissect.calibration_profile import update_profile
    from llmdissect.launch import run_child
    from llmdissect.launch.child import default_threads
    from llmdissect.measure.devices import hardware_name
    from llmdissect.measure.env import capture_env
    from llmdissect.progress import run_with_progress
    from llmdissect.results.recording import record_from_child
    from llmdissect.results.schema import utc_now

    devices = devices or visible_devices()
    threads = threads or default_threads(1)
    config = {"what": "peak", "hardware": hardware_name("cpu" if devices == ["cpu"] else "cuda"), "devices": devices,
              "quick": quick, "min_time_s": (0.3 if quick else 1.0) if min_time_s is None else min_time_s,
              "threads": threads, "serve_engine": (not quick) if serve_engine is None else serve_engine}
    started = utc_now()
    child = run_with_progress(lambda c: run_child(TARGET, c, timeout_s=timeout_s, threads=threads), config, "peak",
                              progress)
    record = record_from_child(mn.OPS, config, child, capture_env(), started_at=started)
    if record.status == "ok":
        add_catalogue(record.metrics)
        if store_profile and threads < default_threads(1):
            record.metrics["profile_note"] = (f"not stored in the calibration profile: measured with {threads} of "
                                              f"{default_threads(1)} cores (MFU divides by the whole CPU's peak)")
        elif store_profile:
            record.metrics["profile_path"] = str(update_profile(profile_update(record.metrics, record.id)))
    return record, child
