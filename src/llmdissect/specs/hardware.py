"""Accelerator and platform specifications, and the local CPU.

Catalogued devices come from TOML files whose every number carries a source URL. The local
CPU gets its ceilings from measurement (`llmdissect peak` writes the calibration profile),
never from a guess: until then its peaks are unknown.
"""
from __future__ import annotations

import json
import os
import platform as _platform
import re
from dataclasses import asdict, dataclass, field, replace
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from llmdissect.errors import UserError
from llmdissect.specs.tomlfile import read_toml, require

DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8", "int8")


@dataclass(frozen=True)
class Link:
    """A data path, its bandwidth per device in one direction."""

    kind: str
    unidirectional_bytes_per_s: float
    source_url: str = ""


@dataclass(frozen=True)
class HardwareSpec:
    """One device: dense peaks per dtype, memory, and its links."""

    name: str
    kind: str  # gpu | cpu
    memory_bytes: int
    memory_bandwidth_bytes_per_s: float | None
    peak_flops_per_s: dict[str, float]
    vendor: str = ""
    architecture: str = ""
    description: str = ""
    aliases: tuple[str, ...] = ()
    link: Link | None = None
    host_link: Link | None = None
    scale_out: Link | None = None
    """The network between nodes, per device, one direction (the reference server's NIC for
    each GPU); None where no reference node is catalogued."""
    node_devices: int = 0
    """Devices in the reference node that `scale_out` belongs to (0: unknown)."""
    source_url: str = ""
    efficiency: dict[str, float] = field(default_factory=dict)
    """Optional per-operator-class efficiency factors (gemm, attention, memory, ...)."""
    measured: bool = False
    """True when the peaks come from this machine's calibration profile."""
    usd_per_hour: float | None = None
    """Price of one device, USD per hour (for cost per token); None: not catalogued."""
    usd_per_hour_source: str = ""
    """Where the price comes from (a URL and its date); required with a price."""
    fp16_accumulate_flops_per_s: float = 0.0
    """Dense fp16 tensor-core peak when the products accumulate in fp16 (a GeForce part runs
    them at twice its fp32-accumulate rate); 0: no faster than `peak_flops_per_s["fp16"]`."""
    gemm_mamf_fraction: float = 0.0
    """The best bf16 matmul PyTorch reaches on this part over its datasheet's dense peak, where
    a source measured it (perfmodel.defaults.efficiency_for); 0: its architecture's figure."""

    def peak(self, dtype: str) -> float | None:
        """Dense peak FLOP/s for a dtype, or None when unknown."""
        return self.peak_flops_per_s.get(dtype)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["aliases"] = list(self.aliases)
        return d


@dataclass(frozen=True)
class Platform:
    """N devices of one kind in one node, and the interconnect between them."""

    name: str
    device: HardwareSpec
    num_devices: int
    interconnect: Link | None
    host_memory_bytes: int | None = None
    description: str = ""
    source_url: str = ""

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["device"] = self.device.to_dict()
        return d


def _link(data: dict[str, Any] | None, path: Path, key: str) -> Link | None:
    if data is None:
        return None
    if not isinstance(data, dict):
        raise UserError(f"{path}: [{key}] must be a table")
    return Link(kind=require(data, "kind", str, path),
                unidirectional_bytes_per_s=float(require(data, "unidirectional_bytes_per_s", (int, float), path)),
                source_url=str(data.get("source_url", "")))


def _node_devices(data: dict[str, Any], path: Path) -> int:
    n = data.get("node_devices", 0)
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise UserError(f"{path}: node_devices must be a non-negative integer")
    if data.get("scale_out") is not None and n == 0:
        raise UserError(f"{path}: [scale_out] needs node_devices (the devices of the node it belongs to)")
    return n


def _hardware_from_toml(path: Path) -> HardwareSpec:
    data = read_toml(path)
    peaks = require(data, "peak_flops_per_s", dict, path)
    for dtype, value in peaks.items():
        if dtype not in DTYPES or isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise UserError(f"{path}: peak_flops_per_s.{dtype} must be a positive number for one of {DTYPES}")
    memory = require(data, "memory_bytes", int, path)
    bandwidth = float(require(data, "memory_bandwidth_bytes_per_s", (int, float), path))
    if memory <= 0 or bandwidth <= 0:
        raise UserError(f"{path}: memory_bytes and memory_bandwidth_bytes_per_s must be positive")
    return HardwareSpec(
        name=require(data, "name", str, path), kind=require(data, "kind", str, path),
        memory_bytes=memory, memory_bandwidth_bytes_per_s=bandwidth,
        peak_flops_per_s={k: float(v) for k, v in peaks.items()},
        vendor=str(data.get("vendor", "")), architecture=str(data.get("architecture", "")),
        description=str(data.get("description", "")), aliases=tuple(data.get("aliases", ())),
        link=_link(data.get("link"), path, "link"), host_link=_link(data.get("host_link"), path, "host_link"),
        scale_out=_link(data.get("scale_out"), path, "scale_out"), node_devices=_node_devices(data, path),
        source_url=require(data, "source_url", str, path),
        efficiency={k: float(v) for k, v in data.get("efficiency", {}).items()},
        fp16_accumulate_flops_per_s=_positive_or_zero(data, "fp16_accumulate_flops_per_s", path),
        gemm_mamf_fraction=_positive_or_zero(data, "gemm_mamf_fraction", path),
        **_price(data, path),
    )


def _positive_or_zero(data: dict[str, Any], key: str, path: Path) -> float:
    value = data.get(key, 0.0)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise UserError(f"{path}: {key} must be a positive number")
    return float(value)


def _price(data: dict[str, Any], path: Path) -> dict[str, Any]:
    """The optional `usd_per_hour` (positive) with its `usd_per_hour_source` (required with it)."""
    if "usd_per_hour" not in data:
        return {}
    usd = data["usd_per_hour"]
    if isinstance(usd, bool) or not isinstance(usd, (int, float)) or usd <= 0:
        raise UserError(f"{path}: usd_per_hour must be a positive number")
    return {"usd_per_hour": float(usd), "usd_per_hour_source": require(data, "usd_per_hour_source", str, path)}


def _data(kind: str) -> Path:
    return Path(str(resources.files("llmdissect.specs") / "data" / kind))


@lru_cache(maxsize=1)
def _catalogue() -> dict[str, HardwareSpec]:
    """Every catalogued device by its file stem, lower-case name and aliases."""
    index: dict[str, HardwareSpec] = {}
    for path in sorted(_data("hardware").glob("*.toml")):
        spec = _hardware_from_toml(path)
        for key in (path.stem, spec.name, *spec.aliases):
            index[key.lower()] = spec
    return index


def list_hardware() -> list[HardwareSpec]:
    seen: dict[str, HardwareSpec] = {}
    for spec in _catalogue().values():
        seen.setdefault(spec.name, spec)
    return list(seen.values())


def get_hardware(name: str) -> HardwareSpec:
    """A catalogued device by name or alias, or `cpu` for this machine's CPU."""
    key = name.strip().lower()
    if key in ("cpu", "local", "local-cpu"):
        return local_cpu()
    path = Path(name)
    if path.suffix == ".toml":
        return _hardware_from_toml(path)
    try:
        return _catalogue()[key]
    except KeyError:
        known = sorted({s.name.lower() for s in list_hardware()})
        raise UserError(f"unknown hardware {name!r}; known devices: {', '.join(known)}, cpu; "
                        f"platforms: {', '.join(p.name for p in list_platforms())}") from None


def _platform_from_toml(path: Path) -> Platform:
    data = read_toml(path)
    n = require(data, "num_devices", int, path)
    if n <= 0:
        raise UserError(f"{path}: num_devices must be positive")
    return Platform(name=require(data, "name", str, path), device=get_hardware(require(data, "device", str, path)),
                    num_devices=n, interconnect=_link(data.get("interconnect"), path, "interconnect"),
                    host_memory_bytes=data.get("host_memory_bytes"), description=str(data.get("description", "")),
                    source_url=str(data.get("source_url", "")))


@lru_cache(maxsize=1)
def _platforms() -> dict[str, Platform]:
    return {p.name.lower(): p for p in (_platform_from_toml(f) for f in sorted(_data("platforms").glob("*.toml")))}


def list_platforms() -> list[Platform]:
    return list(_platforms().values())


_N_X_DEVICE = re.compile(r"^(\d+)\s*x\s*(.+)$")


def resolve_platform(name: str, gpus: int | None = None) -> Platform:
    """A platform (`8xa800`), `NxDEVICE` (`4xh100`), or one device (`a800`, `cpu`).

    `gpus`, when given, overrides the number of devices.
    """
    if gpus is not None and gpus <= 0:
        raise UserError(f"--gpus must be positive, got {gpus}")
    key = name.strip().lower()
    plat = _platforms().get(key)
    if plat is None:
        m = _N_X_DEVICE.match(key)
        if m:
            device = get_hardware(m.group(2))
            plat = Platform(name=key, device=device, num_devices=int(m.group(1)), interconnect=device.link)
        else:
            device = get_hardware(key)
            plat = Platform(name=device.name.lower(), device=device, num_devices=1, interconnect=device.link)
    if plat.num_devices <= 0:
        raise UserError(f"platform {name!r} has no devices")
    if gpus is not None and gpus != plat.num_devices:
        plat = replace(plat, name=f"{gpus}x{plat.device.name.lower()}", num_devices=gpus)
    return plat


def match_gpu(device_name: str) -> HardwareSpec | None:
    """The catalogued device a driver name (e.g. 'NVIDIA H100 80GB HBM3') refers to."""
    name = device_name.lower().replace("geforce", "").replace("nvidia", "")
    tokens = set(name.replace("-", " ").split())
    for spec in list_hardware():
        base = spec.name.lower().split("-")[0] if not spec.name.lower().startswith("rtx") else \
            spec.name.lower().split("-")[1]
        if base in tokens:
            if spec.name.startswith(("H100", "A100", "A800")) and "pcie" in tokens:
                continue  # PCIe variants have other peaks; not catalogued
            return spec
    return None


# ---- the local CPU ------------------------------------------------------------------

def cpu_model_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return _platform.processor() or _platform.machine()


def last_level_cache_bytes(root: str = "/sys/devices/system/cpu/cpu0/cache") -> int | None:
    """The size of this CPU's last-level cache, from Linux's sysfs (None where unknown)."""
    best: tuple[int, int] | None = None
    for index in Path(root).glob("index*"):
        try:
            level = int((index / "level").read_text())
            kind = (index / "type").read_text().strip()
            text = (index / "size").read_text().strip().upper()
        except (OSError, ValueError):
            continue
        if kind == "Instruction":
            continue
        scale = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1)
        try:
            size = int(text.rstrip("KMG")) * scale
        except ValueError:
            continue
        if best is None or level > best[0]:
            best = (level, size)
    return best[1] if best else None


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def total_memory_bytes() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def local_cpu(calibration: dict[str, Any] | None = None) -> HardwareSpec:
    """This machine's CPU: detected model, cores and memory; peaks from the calibration
    profile when one has been measured (`llmdissect peak`), else unknown (empty)."""
    if calibration is None:
        from llmdissect.paths import calibration_path

        path = calibration_path()
        if path.is_file():
            try:
                calibration = json.loads(path.read_text())
            except (OSError, json.JSONDecodeError):
                calibration = None
    cal = (calibration or {}).get("cpu", calibration or {})
    peaks = {k: float(v) for k, v in (cal.get("peak_flops_per_s") or {}).items()}
    bandwidth = cal.get("memory_bandwidth_bytes_per_s")
    return HardwareSpec(
        name="cpu", kind="cpu", memory_bytes=total_memory_bytes(),
        memory_bandwidth_bytes_per_s=float(bandwidth) if bandwidth else None,
        peak_flops_per_s=peaks, vendor=_platform.machine(), description=f"{cpu_model_name()}, {usable_cores()} cores",
        source_url="measured on this machine" if peaks else "detected; peaks not measured (run `llmdissect peak`)",
        efficiency={k: float(v) for k, v in (cal.get("efficiency") or {}).items()},
        measured=bool(peaks),
    )
