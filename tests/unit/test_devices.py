"""One device resolution for every measured command (measure.devices)."""
from __future__ import annotations

import pytest

from llmdissect.errors import UserError
from llmdissect.measure import devices
from llmdissect.measure.devices import LocalDevice, hardware_name, resolve_device


def test_cpu_is_cpu_everywhere():
    assert resolve_device("cpu") == LocalDevice("cpu", "cpu")
    assert hardware_name("cpu") == "cpu"


def test_bad_device_names_the_option():
    with pytest.raises(UserError, match="--device must be auto, cpu or cuda, got 'tpu'"):
        resolve_device("tpu")


def test_without_a_gpu_auto_is_cpu_and_cuda_is_refused(monkeypatch):
    monkeypatch.setattr(devices, "_first_gpu_name", lambda: None)
    assert resolve_device("auto") == LocalDevice("cpu", "cpu")
    with pytest.raises(UserError, match="no NVIDIA GPU is visible"):
        resolve_device("cuda")


def test_with_a_gpu_records_carry_its_driver_name(monkeypatch):
    monkeypatch.setattr(devices, "_first_gpu_name", lambda: "NVIDIA H100 80GB HBM3")
    assert resolve_device("auto") == LocalDevice("cuda", "NVIDIA H100 80GB HBM3")
    assert hardware_name("cuda:1") == "NVIDIA H100 80GB HBM3"
