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


def _stats(median):
    return {"median": median, "mean": median, "n": 3}


def test_infer_and_training_cost_at_their_rates():
    from llmdissect.results.schema import RunRecord
    from llmdissect.workloads.cost import add_cost

    infer = RunRecord(kind="infer", config={"hardware": "cpu"}, metrics={
        "prefill_tokens_per_s": _stats(1000.0), "decode_tokens_per_s": _stats(100.0)}).finish("ok")
    add_cost(infer, 3.6)  # 0.001 USD a second
    assert infer.metrics["usd_per_million_input_tokens"] == pytest.approx(1.0)
    assert infer.metrics["usd_per_million_output_tokens"] == pytest.approx(10.0)
    assert infer.metrics["usd_per_hour_source"] == "--usd-per-hour"
    train = RunRecord(kind="pretrain", config={"hardware": "cpu", "nproc": 2}, metrics={"tokens_per_s": 500.0})
    add_cost(train.finish("ok"), 7.2)
    assert train.metrics["usd_per_million_training_tokens"] == pytest.approx(4.0)
    bare = RunRecord(kind="pretrain", config={"hardware": "cpu"}, metrics={"tokens_per_s": 500.0}).finish("ok")
    add_cost(bare, None)  # no price anywhere: no cost stated
    assert "usd_per_million_training_tokens" not in bare.metrics
    failed = RunRecord(kind="infer", config={}, metrics={}).finish("failed", "x")
    add_cost(failed, 3.6)
    assert failed.metrics == {}


def test_catalogue_price_is_per_device_with_its_source(tmp_path, monkeypatch):
    import dataclasses

    import llmdissect.specs as specs
    from llmdissect.errors import UserError
    from llmdissect.workloads.cost import price_for

    h100 = dataclasses.replace(specs.get_hardware("h100"), usd_per_hour=2.5, usd_per_hour_source="https://x (2026)")
    monkeypatch.setattr(specs, "get_hardware", lambda name: h100)
    assert price_for("H100-SXM", 8, None) == (20.0, "catalogue H100-SXM x 8: https://x (2026)")
    assert price_for("H100-SXM", 8, 30.0) == (30.0, "--usd-per-hour")  # the override wins
    assert price_for("cpu", 1, None) is None
    with pytest.raises(UserError, match="positive"):
        price_for(None, 1, 0.0)


def test_catalogue_price_needs_a_source(tmp_path):
    from llmdissect.errors import UserError
    from llmdissect.specs.hardware import _hardware_from_toml

    base = ('name = "X"\nkind = "gpu"\nmemory_bytes = 1024\nmemory_bandwidth_bytes_per_s = 1e9\n'
            'source_url = "https://example.com"\n')
    f = tmp_path / "x.toml"
    f.write_text(base + 'usd_per_hour = 2.0\nusd_per_hour_source = "https://example.com/pricing (2026-01)"\n'
                 "[peak_flops_per_s]\nbf16 = 1e12\n")
    assert _hardware_from_toml(f).usd_per_hour == 2.0
    f.write_text(base + "usd_per_hour = 2.0\n[peak_flops_per_s]\nbf16 = 1e12\n")
    with pytest.raises(UserError, match="usd_per_hour_source"):
        _hardware_from_toml(f)
    assert _hardware_from_toml(_shipped("h100")).usd_per_hour is None  # the shipped catalogue carries no prices


def _shipped(name):
    from llmdissect.specs.hardware import _data

    return next(p for p in _data("hardware").glob("*.toml") if name in p.stem)


def test_the_meter_starts_after_the_warm_up():
    from llmdissect.measure.timer import LoopPolicy, measure_loop

    events = []
    measure_loop(lambda: events.append("call"), LoopPolicy(warmup=2, min_iters=3, max_iters=3),
                 on_timed_start=lambda: events.append("start"))
    assert events == ["call", "call", "start", "call", "call", "call"]
