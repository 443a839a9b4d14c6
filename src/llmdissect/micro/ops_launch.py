"""`bench ops`, the parent side: launch the child (`ops_child.run`), make the `ops` record and
turn the rows into per-class efficiencies for the calibration profile."""
from __future__ import annotations

from typing import Any

import llmdissect.metric_names as mn
from llmdissect.micro.ops_config import OpsConfig

TARGET = "llmdissect.micro.ops_child:run"


def profile_update(record: Any) -> dict[str, Any]:
    """What a `bench ops` record adds to the calibration profile."""
    eff = record.metrics["efficiency"]
    scalar = {k: v for k, v in eff.items() if k in ("gemm", "attention", "memory")}
    # the curves by size are replaced whole (empty where this run measured one size only),
    # so that a stale curve never sits beside a new class efficiency
    detail = {"efficiency": scalar, "gemm_efficiency_by_flops": eff.get("gemm_by_flops", []),
              "attention_efficiency_by_seq": eff.get("attention_by_seq", []),
              "attention_bwd_efficiency_by_seq": eff.get("attention_bwd_by_seq", []),
              "memory_efficiency_by_tokens": eff.get("memory_by_tokens", []),
              **({"experts_efficiency_by_rows": eff["experts_by_rows"]} if eff.get("experts_by_rows") else {}),
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
    from llmdissect.measure.devices import hardware_name
    from llmdissect.measure.env import capture_env
    from llmdissect.progress import run_with_progress
    from llmdissect.results.recording import record_from_child
    from llmdissect.results.schema import utc_now

    config = {"what": "ops", **cfg.model_dump(), "pass": cfg.passes,
              "hardware": hardware_name(cfg.device)}
    config.pop("passes")
    started = utc_now()
    child = run_with_progress(lambda c: run_child(TARGET, {**c, "passes": cfg.passes}, timeout_s=timeout_s,
                                                  threads=threads), config, "ops", progress)
    record = record_from_child(mn.OPS, config, child, capture_env(), started_at=started)
    if record.status == "ok" and store_profile and record.metrics["efficiency"]:
        record.metrics["profile_path"] = str(update_profile(profile_update(record)))
    return record, child
