"""Cost per million tokens from an hourly price, and the RAPL energy meter on a fake powercap tree."""
import pytest

from llmdissect.measure.energy import EnergyMeter
from llmdissect.workloads.cost import serving_cost, usd_per_million


def test_cost_per_million_tokens_charges_the_whole_run():
    # 2 USD/hour for 90 s is 0.05 USD; over 10,000 output tokens that is 5 USD per million
    assert usd_per_million(2.0, 90.0, 10_000) == pytest.approx(5.0)
    m = serving_cost(2.0, "--usd-per-hour", 90.0, 50_000, 10_000)
    assert m["usd_per_million_input_tokens"] == pytest.approx(1.0)
    assert m["usd_per_million_output_tokens"] == pytest.approx(5.0)
    assert m["usd_per_hour_source"] == "--usd-per-hour"
    assert serving_cost(None, "", 90.0, 1, 1) == {} and usd_per_million(2.0, 0.0, 5) is None


def _domain(root, name, uj, max_uj=1_000_000_000):
    d = root / name
    d.mkdir()
    (d / "energy_uj").write_text(f"{uj}\n")
    (d / "max_energy_range_uj").write_text(f"{max_uj}\n")
    return d


def test_rapl_packages_are_summed_and_a_wrap_is_corrected(tmp_path):
    p0 = _domain(tmp_path, "intel-rapl:0", 5_000_000)
    p1 = _domain(tmp_path, "intel-rapl:1", 999_000_000)
    sub = _domain(tmp_path, "intel-rapl:0:0", 1)  # a subdomain of package 0: not counted again
    meter = EnergyMeter(root=tmp_path)
    meter.start()
    assert "rapl" in meter.sources
    (p0 / "energy_uj").write_text("7000000\n")  # +2 J
    (p1 / "energy_uj").write_text("500000\n")  # wrapped: +1.5 J
    (sub / "energy_uj").write_text("9999999\n")
    assert meter.stop() == pytest.approx(3.5)


def test_no_counters_say_why(tmp_path):
    meter = EnergyMeter(root=tmp_path / "none")
    meter.start()
    if not meter.sources:  # (a machine with NVML would measure its GPUs instead)
        assert meter.stop() is None and "no RAPL counters" in meter.why_not
