"""The inference workload itself on debug-llama (in process, real transformers generate):
every cache and quantization option runs and gives the documented metrics."""
import pytest

from llmdissect.specs import get_model
from llmdissect.workloads.infer_child import run
from llmdissect.workloads.infer_metrics import kv_cache_bytes_formula

pytestmark = pytest.mark.slow  # each test builds and runs a model (seconds on 2 shared cores)

BATCH, INPUT_LEN, OUTPUT_LEN = 2, 12, 10
STATS = ("ttft_s", "tpot_s", "e2e_latency_s", "prefill_tokens_per_s", "decode_tokens_per_s", "decode_step_s")


def _config(**kw):
    cfg = {"model": "debug-llama", "hardware": "cpu", "batch": BATCH, "input_len": INPUT_LEN,
           "output_len": OUTPUT_LEN, "dtype": "fp32", "attn": "sdpa", "cache": "dynamic", "quant": "none",
           "compile": False, "warmup": 1, "repeats": 3, "seed": 0, "device": "cpu"}
    cfg.update(kw)
    return cfg


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """One compute thread: on this shared 2-core machine two spinning threads make step
    times jump when another process takes a core (the child sets its threads the same way)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def baseline():
    return run(_config())["metrics"]


@pytest.mark.parametrize("cache", ["dynamic", "static"])
def test_each_cache_gives_the_metrics_and_the_kv_bytes_of_the_formula(cache):
    m = run(_config(cache=cache, attn="eager" if cache == "static" else "sdpa"))["metrics"]
    for key in STATS:
        assert m[key]["n"] == (3 if key != "decode_step_s" else 3 * (OUTPUT_LEN - 1)), key
        assert m[key]["median"] > 0, key
    spec = get_model("debug-llama")
    length = INPUT_LEN + OUTPUT_LEN - 1  # the last output token is never fed back
    assert m["kv_cache_positions"] == length
    assert m["kv_cache_bytes"] == kv_cache_bytes_formula(spec, BATCH, length, 4)
    assert m["kv_cache_bytes"] == 2 * spec.num_layers * BATCH * length * spec.num_kv_heads * spec.head_dim * 4
    # ttft + (out-1) x step vs e2e: whether it lands within 10 % depends on the machine's
    # noise (flagged in the record); its arithmetic and the bound every call obeys do not
    c = m["consistency"]
    assert c["predicted_e2e_s"] == pytest.approx(m["ttft_s"]["median"]
                                                 + (OUTPUT_LEN - 1) * m["decode_step_s"]["median"])
    assert c["ok"] == (c["relative_error"] <= 0.10)
    assert m["e2e_latency_s"]["min"] >= m["ttft_s"]["min"] + (OUTPUT_LEN - 1) * m["decode_step_s"]["min"]
    assert m["first_call_s"] > 0 and m["first_call_ttft_s"] > 0
    assert m["peak_memory_bytes"] > m["weights_bytes"] + m["kv_cache_bytes"] / 2
    assert m["peak_rss_bytes"] > m["peak_memory_bytes"]  # kept apart: the process holds far more than tensors
    hw = m["hardware_allows"]
    assert hw["decode_bandwidth_bytes_per_s"] == pytest.approx(hw["decode_bytes_per_step"]
                                                               / m["decode_step_s"]["median"])
    assert hw["prefill_flops_per_s"] > 0


@pytest.mark.parametrize("quant", ["int8-weight", "int8-dynamic", "nf4", "int8-bnb"])
def test_each_quantization_runs_with_smaller_weights(quant, baseline):
    m = run(_config(quant=quant))["metrics"]
    assert m["decode_tokens_per_s"]["median"] > 0 and m["ttft_s"]["median"] > 0
    assert m["weights_bytes"] < baseline["weights_bytes"] * 0.8
    assert m["weights_bytes_read_per_step"] < baseline["weights_bytes_read_per_step"]
    assert m["kv_cache_bytes"] == baseline["kv_cache_bytes"]  # the cache stays in the compute dtype


def test_measured_ceilings_give_fractions(tmp_path, monkeypatch):
    import json

    monkeypatch.setenv("LLMDISSECT_HOME", str(tmp_path))
    (tmp_path / "calibration.json").write_text(json.dumps(
        {"cpu": {"peak_flops_per_s": {"fp32": 5e10}, "memory_bandwidth_bytes_per_s": 1e10}}))
    m = run(_config(repeats=1, warmup=0))["metrics"]
    hw = m["hardware_allows"]
    assert hw["memory_bandwidth_bytes_per_s"] == 1e10 and "measured" in hw["ceilings_source"]
    assert hw["decode_bandwidth_fraction"] == pytest.approx(hw["decode_bandwidth_bytes_per_s"] / 1e10)
    assert hw["prefill_peak_fraction"] == pytest.approx(hw["prefill_flops_per_s"] / 5e10)
    assert m["first_call_s"] is None  # no warm-up: nothing to report apart


def test_a_local_model_folder_is_loaded_with_its_weights(tmp_path):
    from llmdissect.modeling import write_model_folder

    folder = write_model_folder(get_model("debug-llama"), tmp_path / "debug-llama", seed=3)
    m = run(_config(model=str(folder), repeats=1))["metrics"]
    assert m["weights_source"].startswith("local folder") and m["decode_tokens_per_s"]["median"] > 0
    assert m["kv_cache_bytes"] == kv_cache_bytes_formula(get_model("debug-llama"), BATCH, INPUT_LEN + OUTPUT_LEN - 1, 4)
