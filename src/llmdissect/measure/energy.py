"""Energy over a run where this machine lets us read it, else why not.

CPU packages: Intel/AMD RAPL counters under /sys/class/powercap (intel-rapl:N/energy_uj, the
package domains only, so that the core and dram subdomains are not counted twice; a counter
that wraps past max_energy_range_uj is corrected once). NVIDIA GPUs: NVML's total energy
counter (nvmlDeviceGetTotalEnergyConsumption, millijoules, Volta and later) when pynvml is
installed. The meter covers the whole machine's packages and GPUs, not one process.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import llmdissect.metric_names as mn

POWERCAP = Path("/sys/class/powercap")


def _rapl_packages(root: Path) -> list[Path]:
    return sorted(p for p in root.glob("intel-rapl:*") if re.fullmatch(r"intel-rapl:\d+", p.name))


def _read_uj(domain: Path) -> int:
    return int((domain / "energy_uj").read_text().strip())


@dataclass
class EnergyMeter:
    """start(), then stop() -> joules (or None, with `why_not` saying why)."""

    root: Path = POWERCAP
    sources: list[str] = field(default_factory=list)
    why_not: str | None = None
    _rapl: dict[Path, int] = field(default_factory=dict)
    _nvml: dict[int, int] = field(default_factory=dict)

    def start(self) -> None:
        reasons = []
        packages = _rapl_packages(self.root) if self.root.is_dir() else []
        if not packages:
            reasons.append(f"no RAPL counters under {self.root}")
        for p in packages:
            try:
                self._rapl[p] = _read_uj(p)
            except (OSError, ValueError) as e:
                reasons.append(f"{p / 'energy_uj'} not readable ({getattr(e, 'strerror', None) or e})")
                self._rapl.clear()
                break
        try:
            import pynvml

            pynvml.nvmlInit()
            for i in range(pynvml.nvmlDeviceGetCount()):
                self._nvml[i] = pynvml.nvmlDeviceGetTotalEnergyConsumption(pynvml.nvmlDeviceGetHandleByIndex(i))
        except ImportError:
            reasons.append("pynvml not installed (NVIDIA GPU energy)")
        except Exception as e:  # no driver, no GPU, or a GPU without the counter
            reasons.append(f"NVML energy not available ({type(e).__name__})")
            self._nvml.clear()
        self.sources = (["rapl"] if self._rapl else []) + (["nvml"] if self._nvml else [])
        self.why_not = None if self.sources else "; ".join(reasons)

    def stop(self) -> float | None:
        if not self.sources:
            return None
        joules = 0.0
        for p, before in self._rapl.items():
            now = _read_uj(p)
            if now < before:  # the counter wrapped
                now += int((p / "max_energy_range_uj").read_text().strip())
            joules += (now - before) / 1e6
        if self._nvml:
            import pynvml

            for i, before in self._nvml.items():
                joules += (pynvml.nvmlDeviceGetTotalEnergyConsumption(pynvml.nvmlDeviceGetHandleByIndex(i))
                           - before) / 1e3
        return joules


def energy_metrics(meter: EnergyMeter, joules: float | None, tokens: int, per_token_key: str) -> dict[str, object]:
    """`energy_j` and joules per token under `per_token_key`, or why they are not there."""
    if joules is None:
        return {"energy_not_measured": meter.why_not}
    return {mn.ENERGY_J: joules, "energy_sources": meter.sources, per_token_key: joules / tokens if tokens else None}
