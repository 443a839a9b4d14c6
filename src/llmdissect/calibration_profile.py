"""The machine's calibration profile: measured ceilings, efficiencies and collective fits.

One JSON file per machine (`paths.calibration_path()`), written by `peak`, `calibrate`,
`bench ops` and `bench comm`, read by `estimate` and by `specs.hardware.local_cpu()`:

    {
      "schema": 1,
      "machine": {"cpu_model": ..., "cpu_cores": ..., "hostname": ...},
      "cpu": {"peak_flops_per_s": {"fp32": ...}, "memory_bandwidth_bytes_per_s": ...,
              "theoretical_peak_flops_per_s": {...}},
      "gpus": {"<device name>": {same keys as cpu}},
      "efficiency": {"<operator class>": fraction of peak, ...},
      "collectives": {"<backend>": {"<op>": {"alpha_s": ..., "beta_s_per_byte": ...,
                                               "nproc": ..., "fit_error": ...}}},
      "perfmodel": {"framework_context_bytes": ..., "fragmentation_fraction": ...,
                    "overlap_fraction": ..., "cpu_adam_params_per_s": ...},  (optional, by hand)
      "updated_at": ...
    }

Sections are merged on update, so one tool's numbers never erase another's.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from llmdissect.errors import UserError
from llmdissect.paths import calibration_path

SCHEMA = 1


def load_profile(path: str | os.PathLike | None = None, *, required: bool = False) -> dict[str, Any]:
    """The profile at `path` (default: this machine's); `{}` when absent unless `required`."""
    p = Path(path) if path is not None else calibration_path()
    if not p.is_file():
        if required:
            raise UserError(f"calibration profile not found: {p} (run `llmdissect calibrate` or `llmdissect peak`)")
        return {}
    try:
        data = json.loads(p.read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UserError(f"malformed calibration profile {p}: {e}") from None
    if not isinstance(data, dict):
        raise UserError(f"malformed calibration profile {p}: not a JSON object")
    return data


def _merge(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in update.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def update_profile(update: dict[str, Any], path: str | os.PathLike | None = None) -> Path:
    """Merge `update` into the profile (deeply) and write it atomically."""
    from llmdissect.measure.env import capture_env
    from llmdissect.results.schema import utc_now

    p = Path(path) if path is not None else calibration_path()
    env = capture_env()
    profile = _merge(load_profile(p), update)
    profile.update(schema=SCHEMA, updated_at=utc_now(),
                   machine={"cpu_model": env["cpu_model"], "cpu_cores": env["cpu_cores"], "hostname": env["hostname"]})
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_suffix(".tmp")
        tmp.write_text(json.dumps(profile, indent=2, allow_nan=False))
        tmp.replace(p)
    except OSError as e:
        raise UserError(f"cannot write calibration profile {p}: {e.strerror or e}") from None
    return p
