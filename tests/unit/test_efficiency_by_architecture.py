"""Default efficiencies by GPU architecture (perfmodel.defaults.efficiency_for): the GEMM
ceiling scaled by each architecture's MAMF over the A100's, FlashAttention-2's utilisation on
Hopper; a hardware TOML's own `[efficiency]` wins, and CPUs keep the class defaults."""
from __future__ import annotations

import dataclasses

import pytest

from llmdissect.perfmodel.ceilings import machine_for
from llmdissect.perfmodel.defaults import DEFAULT_EFFICIENCY, efficiency_for
from llmdissect.specs import resolve_platform


def test_ampere_is_the_reference():
    assert efficiency_for("ampere") == DEFAULT_EFFICIENCY


def test_hopper_gemm_is_scaled_by_its_mamf_over_the_a100s():
    # MAMF bf16: A100 SXM 271.2 / 312, H100 SXM 794.5 / 989 (ml-engineering's table)
    expected = DEFAULT_EFFICIENCY["gemm"] * (794.5 / 989) / (271.2 / 312)
    assert efficiency_for("hopper")["gemm"] == pytest.approx(expected, rel=2e-3)
    assert efficiency_for("Hopper")["attention"] == 0.35  # FlashAttention-3's abstract: FA2 at 35 % on H100


def test_unknown_architecture_takes_the_defaults():
    assert efficiency_for("ada") == DEFAULT_EFFICIENCY
    assert efficiency_for(None) == DEFAULT_EFFICIENCY


def test_machine_for_reads_the_device_architecture():
    h100 = machine_for(resolve_platform("h100", 1), "bf16")
    a100 = machine_for(resolve_platform("a100", 1), "bf16")
    assert h100.efficiency["gemm"] < a100.efficiency["gemm"] == DEFAULT_EFFICIENCY["gemm"]
    assert h100.efficiency["attention"] == 0.35 and a100.efficiency["attention"] == DEFAULT_EFFICIENCY["attention"]
    assert h100.ceilings.efficiency == h100.efficiency
    cpu = machine_for(resolve_platform("cpu", 1), "fp32")
    assert cpu.efficiency["gemm"] == DEFAULT_EFFICIENCY["gemm"]


def test_a_hardware_toml_efficiency_wins():
    platform = resolve_platform("h100", 1)
    device = dataclasses.replace(platform.device, efficiency={"attention": 0.75})  # FlashAttention-3's figure
    mine = machine_for(dataclasses.replace(platform, device=device), "bf16")
    assert mine.efficiency["attention"] == 0.75
    assert mine.efficiency["gemm"] == efficiency_for("hopper")["gemm"]


@pytest.mark.parametrize("device,best,datasheet", [
    # zzc0721/torch-performance-test-data database.md: the median of the 24GB parts' bf16 rows
    ("rtx4090", (163.09 + 170.06) / 2, 165.2), ("rtx3090", 76.58, 71.0)])
def test_a_geforce_part_takes_its_own_measured_matmul_ceiling(device, best, datasheet):
    expected = DEFAULT_EFFICIENCY["gemm"] * (best / datasheet) / (271.2 / 312)
    mach = machine_for(resolve_platform(device, 1), "bf16")
    assert mach.efficiency["gemm"] == pytest.approx(expected, rel=2e-3)
    assert mach.efficiency["gemm"] > efficiency_for("ampere")["gemm"]  # above the datasheet's boost clock
