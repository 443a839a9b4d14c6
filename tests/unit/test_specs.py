import json
from pathlib import Path

import pytest

from llmdissect.errors import UserError
from llmdissect.specs import get_hardware, get_model, list_hardware, list_models, list_platforms, resolve_platform
from llmdissect.specs.models import from_hf_config

# Published parameter counts of the Hugging Face checkpoints.
PUBLISHED = {"llama2-7b": 6_738_415_616, "llama2-13b": 13_015_864_320, "llama2-70b": 68_976_648_192,
             "llama3-8b": 8_030_261_248, "llama3-70b": 70_553_706_496, "mistral-7b": 7_241_732_096}
# Rounded totals and active counts the model cards publish (DeepSeek-V3's 671B is without its
# MTP module; gpt-oss's 3.6B active leaves out the input embedding).
# Qwen2.5's model cards: "Number of Parameters: 7.61B" (huggingface.co/Qwen/Qwen2.5-7B).
PUBLISHED_DENSE_BILLIONS = {"qwen2.5-7b": 7.61}
PUBLISHED_MOE_BILLIONS = {"mixtral-8x7b": (46.7, 12.9), "qwen3-30b-a3b": (30.5, 3.3), "deepseek-v3": (671, 37),
                          "olmoe-1b-7b": (6.9, 1.3), "gpt-oss-20b": (20.9, 3.6)}


@pytest.mark.parametrize("name", [m.name for m in list_models()])
def test_params_equal_transformers_meta_model(name):
    from llmdissect.modeling import build_model

    spec = get_model(name)
    model = build_model(spec, meta=True)
    named = dict(model.named_parameters())
    assert spec.params == sum(p.numel() for p in named.values())
    emb = model.get_input_embeddings().weight
    assert spec.params_embedding == emb.numel()
    # matmul weights: every matrix (experts are 3-D tensors) and bias but the embedding
    matmul = sum(p.numel() for n, p in named.items() if (p.dim() >= 2 or n.endswith("bias")) and p is not emb)
    assert spec.params_matmul_total == matmul + (emb.numel() if spec.tie_word_embeddings else 0)
    # active: a token uses k of the E routed experts of each MoE layer
    routed = sum(p.numel() for n, p in named.items() if ".experts." in n)
    E, k = spec.num_experts, spec.experts_per_token
    assert spec.params_active == spec.params - (routed * (E - k) // E if E else 0)
    assert spec.params_matmul == spec.params_matmul_total - (spec.params - spec.params_active)


@pytest.mark.parametrize("name,billions", sorted(PUBLISHED_MOE_BILLIONS.items()))
def test_moe_counts_match_model_cards(name, billions):
    spec = get_model(name)
    total, active = billions
    assert spec.params / 1e9 == pytest.approx(total, rel=0.01)
    counted = spec.params_active - spec.params_embedding * (name == "gpt-oss-20b")
    assert counted / 1e9 == pytest.approx(active, rel=0.02)


@pytest.mark.parametrize("name,billions", sorted(PUBLISHED_DENSE_BILLIONS.items()))
def test_dense_counts_match_model_cards(name, billions):
    assert get_model(name).params / 1e9 == pytest.approx(billions, rel=0.01)


def test_qwen2_biases_are_on_q_k_v_only():
    m = get_model("qwen2.5-7b")
    h, kv = m.hidden_size, m.kv_dim
    assert m.params_attention_per_layer == 2 * h * h + 2 * h * kv + (h + 2 * kv)


@pytest.mark.parametrize("name,count", sorted(PUBLISHED.items()))
def test_params_match_published_counts(name, count):
    assert get_model(name).params == count


def test_small_presets_sizes():
    assert 10e6 <= get_model("tiny-llama").params <= 30e6
    assert get_model("debug-llama").params < 2e6
    for tiny in ("tiny-moe", "tiny-mla"):
        assert get_model(tiny).params < 20e6 and get_model(tiny).params_active < get_model(tiny).params


def test_new_presets_cite_their_config():
    for name in ("mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v3", "gpt-oss-20b", "olmoe-1b-7b", "qwen3-8b",
                 "gemma3-12b", "llama3.1-405b", "qwen2.5-7b", "qwen2.5-32b"):
        assert get_model(name).source_url.startswith("https://huggingface.co/")
        assert get_model(name).source_url.endswith("/config.json")


def test_sliding_window_layers():
    assert get_model("gemma3-12b").global_layers == 8  # 48 layers, 5 local : 1 global
    assert get_model("gpt-oss-20b").global_layers == 12
    assert get_model("mistral-7b").global_layers == 0  # every layer within its 4096-token window
    assert get_model("llama3-8b").global_layers == 32


@pytest.mark.parametrize("name", ["tiny-moe", "tiny-mla", "gemma3-12b", "gpt-oss-20b", "mixtral-8x7b", "olmoe-1b-7b",
                                  "qwen3-8b", "qwen2.5-7b"])
def test_new_families_config_json_roundtrip(name, tmp_path: Path):
    spec = get_model(name)
    spec.hf_config().save_pretrained(tmp_path)  # transformers' own spelling of the config
    back = get_model(str(tmp_path))
    assert (back.params, back.params_active, back.global_layers) == (spec.params, spec.params_active,
                                                                     spec.global_layers)


def test_gemma3_multimodal_config_reads_its_language_model(tmp_path: Path):
    spec = get_model("gemma3-12b")
    text = spec.hf_config().to_dict()
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gemma3", "text_config": text}))
    assert get_model(str(tmp_path)).params == spec.params


def test_moe_shapes_must_be_coherent(tmp_path: Path):
    bad = tmp_path / "m.toml"
    bad.write_text("\n".join(['name = "x"', 'model_type = "mixtral"', "hidden_size = 64", "intermediate_size = 128",
                              "num_layers = 1", "num_heads = 4", "num_kv_heads = 4", "vocab_size = 10",
                              "max_position_embeddings = 16", "num_experts = 4", "experts_per_token = 5",
                              "expert_intermediate_size = 32"]))
    with pytest.raises(UserError, match="experts_per_token"):
        get_model(str(bad))


def test_llama2_70b_shapes_are_exact():
    s = get_model("llama2-70b")
    assert (s.hidden_size, s.intermediate_size, s.num_layers, s.num_heads, s.num_kv_heads, s.vocab_size,
            s.max_position_embeddings) == (8192, 28672, 80, 64, 8, 32000, 4096)
    assert s.kv_dim == 1024 and s.head_dim == 128


def test_hf_config_roundtrip(tmp_path: Path):
    spec = get_model("llama3-8b")
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(spec.hf_config_dict()))
    back = from_hf_config(folder)
    assert back.params == spec.params and back.rope_theta == spec.rope_theta
    assert get_model(str(folder / "config.json")).params == spec.params


def test_hf_config_rope_parameters_form(tmp_path: Path):
    cfg = get_model("debug-llama").hf_config()
    cfg.save_pretrained(tmp_path)
    assert get_model(str(tmp_path)).params == get_model("debug-llama").params


def test_unknown_model_is_user_error():
    with pytest.raises(UserError, match="unknown model"):
        get_model("llama-9000")


def test_missing_config_path_is_user_error(tmp_path: Path):
    with pytest.raises(UserError, match="not found"):
        get_model(str(tmp_path / "nowhere" / "config.json"))


def test_malformed_toml_is_user_error(tmp_path: Path):
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "x"\nhidden_size = = 3\n')
    with pytest.raises(UserError, match="malformed TOML"):
        get_model(str(bad))


def test_toml_missing_field_is_named(tmp_path: Path):
    bad = tmp_path / "m.toml"
    bad.write_text('name = "x"\nhidden_size = 64\n')
    with pytest.raises(UserError, match="intermediate_size"):
        get_model(str(bad))


def test_kv_heads_must_divide_heads(tmp_path: Path):
    bad = tmp_path / "m.toml"
    bad.write_text("\n".join(['name = "x"', "hidden_size = 64", "intermediate_size = 128", "num_layers = 1",
                              "num_heads = 4", "num_kv_heads = 3", "vocab_size = 10",
                              "max_position_embeddings = 16"]))
    with pytest.raises(UserError, match="num_kv_heads"):
        get_model(str(bad))


def test_hardware_catalogue_has_sources_and_peaks():
    names = {h.name for h in list_hardware()}
    assert {"A800-80G-SXM", "A100-80G-SXM", "H100-SXM", "H200", "RTX-4090", "RTX-3090"} <= names
    for h in list_hardware():
        assert h.source_url.startswith("http")
        assert h.link is not None and h.link.unidirectional_bytes_per_s > 0
        for dtype in ("fp32", "tf32", "bf16", "fp16", "int8"):
            assert h.peak(dtype) and h.peak(dtype) > 0
    assert get_hardware("h100").peak("fp8") == pytest.approx(1978.9e12)
    assert get_hardware("a800").peak("bf16") == pytest.approx(312e12)


def test_platforms_resolve():
    assert {p.name for p in list_platforms()} >= {"8xa800", "8x4090", "8x3090"}
    p = resolve_platform("8xa800")
    assert p.num_devices == 8 and p.device.name == "A800-80G-SXM"
    assert resolve_platform("4xh100").num_devices == 4
    assert resolve_platform("a100", gpus=2).num_devices == 2
    with pytest.raises(UserError, match="unknown hardware"):
        resolve_platform("8xtpu")


def test_local_cpu_peaks_come_from_calibration_only():
    from llmdissect.specs.hardware import local_cpu

    cpu = local_cpu(calibration={})
    assert cpu.kind == "cpu" and cpu.memory_bytes > 0 and not cpu.measured and cpu.peak("fp32") is None
    measured = local_cpu(calibration={"cpu": {"peak_flops_per_s": {"fp32": 1e11},
                                              "memory_bandwidth_bytes_per_s": 2e10}})
    assert measured.measured and measured.peak("fp32") == 1e11


def test_unsupported_family_layouts_are_user_errors(tmp_path: Path):
    cfg = get_model("tiny-moe").hf_config().to_dict()
    cfg["mlp_only_layers"] = [0]
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(UserError, match="mlp_only_layers"):
        get_model(str(tmp_path))
    cfg = {**get_model("tiny-moe").hf_config().to_dict(), "model_type": "qwen3_next"}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(UserError, match="not supported"):
        get_model(str(tmp_path))
