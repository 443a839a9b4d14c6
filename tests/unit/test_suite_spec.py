"""Suite files: expansion, stable point keys, and errors that name the line and the field."""
from __future__ import annotations

from pathlib import Path

import pytest

from llmdissect.errors import UserError
from llmdissect.suites.spec import builtin_names, load, point_key

GOOD = """\
suite: s1
defaults:
  timeout: 60
entries:
  - kind: pretrain
    name: sweep
    model: debug-llama
    seq: 32
    grid:
      zero: [0, 1]
      recompute: [none, full]
  - kind: estimate
    workload: infer
    model: llama2-7b
    grid:
      hardware: [a800, rtx4090]
      batch: [1, 8]
  - kind: pretrain
    model: debug-llama
    seq: 32
    zero: 0
    recompute: none
"""


def write(tmp_path: Path, text: str) -> str:
    p = tmp_path / "suite.yaml"
    p.write_text(text)
    return str(p)


def test_grid_is_crossed_and_duplicates_dropped(tmp_path):
    s = load(write(tmp_path, GOOD))
    assert s.name == "s1"
    assert [p.kind for p in s.points] == ["pretrain"] * 4 + ["estimate"] * 4
    assert s.duplicates == 1  # the last entry repeats the first point of the grid
    first = s.points[0]
    assert first.options == {"model": "debug-llama", "seq": 32, "zero": 0, "recompute": "none"}
    assert first.name == "sweep" and first.timeout_s == 60
    assert len({p.key for p in s.points}) == 8


def test_point_key_is_stable_and_ignores_option_order():
    a = point_key("pretrain", {"model": "debug-llama", "zero": 2})
    assert a == point_key("pretrain", {"zero": 2, "model": "debug-llama"})
    assert a != point_key("pretrain", {"model": "debug-llama", "zero": 3})
    assert a != point_key("finetune", {"model": "debug-llama", "zero": 2})


@pytest.mark.parametrize("text, fragments", [
    ("entries:\n  - kind: pretrain\n    model: debug-llama\n    zeroo: 2\n", ["line 4", "entries[0].zeroo", "unknown"]),
    ("entries:\n  - kind: pretrain\n    grid:\n      zero: 2\n", ["line 4", "entries[0].grid.zero", "list"]),
    ("entries:\n  - kind: pretrain\n    model: debug-llama\n    seq: many\n", ["line 4", "entries[0].seq"]),
    ("entries:\n  - kind: infer\n    model: debug-llama\n    grid:\n      attn: [sdpa, fast]\n",
     ["line 5", "entries[0].grid.attn", "fast"]),
    ("entries:\n  - kind: pretrain\n  - kind: bake\n", ["line 3", "entries[1].kind", "bake"]),
    ("entries:\n  - kind: estimate\n    workload: pretrain\n    model: llama2-7b\n    hardware: toaster\n",
     ["line 5", "entries[0].hardware"]),
    ("entries:\n  - kind: pretrain\n    model: [debug-llama, tiny-llama]\n", ["line 3", "entries[0].model", "grid"]),
    ("entries:\n  - kind: pretrain\n    timeout: -1\n", ["line 3", "entries[0].timeout"]),
    ("entries:\n  - kind: pretrain\n    max_memory: lots\n", ["line 3", "entries[0].max_memory"]),
    ("entries:\n  - kind: pretrain\n    seq: 32\n    seq: 64\n", ["line 4", "seq", "twice"]),
    ("entries:\n  - kind: pretrain\n   model: x\n", ["line 3", "not valid YAML"]),
    ("suites:\n  - kind: pretrain\n", ["line 1", "suites", "unknown"]),
    ("entries: []\n", ["line 1", "entries"]),
])
def test_malformed_suite_names_line_and_field(tmp_path, text, fragments):
    with pytest.raises(UserError) as e:
        load(write(tmp_path, text))
    message = str(e.value)
    assert message.startswith("suite.yaml: ")
    for f in fragments:
        assert f in message, (f, message)


def test_unknown_suite_name_lists_the_builtins():
    with pytest.raises(UserError, match="paper"):
        load("no-such-suite")
    assert "paper" in builtin_names()


def test_paper_suite_covers_the_matrix():
    s = load("paper")
    moe = [p for p in s.points if p.name.startswith("MoE") or "MoE" in p.name]
    est = [p for p in s.points if p.kind == "estimate" and p not in moe]
    assert {p.options["hardware"] for p in est} == {"8xa800", "8x4090", "8x3090"}
    assert {p.options["model"] for p in est} == {"llama2-7b", "llama2-13b", "llama2-70b"}
    # the mixture-of-experts block: estimated with and without expert parallelism, measured small
    assert {p.options["model"] for p in moe} >= {"mixtral-8x7b", "qwen3-30b-a3b", "tiny-moe", "tiny-mla"}
    assert {p.options.get("ep", 1) for p in moe if p.kind == "pretrain"} == {1, 2}
    assert {p.options.get("ep", 1) for p in moe if p.kind == "estimate"} >= {1, 8}
    pre = [p.options for p in est if p.options["workload"] == "pretrain"]
    assert {(o.get("zero"), o.get("offload", "none")) for o in pre} >= {(0, "none"), (2, "none"), (3, "none"),
                                                                       (2, "optimizer"), (3, "optimizer")}
    assert {o.get("recompute") for o in pre} == {"none", "full"} and {o.get("attn") for o in pre} == {"sdpa", "flash"}
    ft = [p.options for p in est if p.options["workload"] == "finetune"]
    assert {o["quant"] for o in ft} == {"none", "nf4"}  # LoRA and QLoRA
    measured = {p.kind for p in s.points if p.kind != "estimate"}
    assert measured == {"pretrain", "finetune", "infer", "comm", "ops"}
    assert all(p.name and ("scaled-down" in p.name or "paper-scale" in p.name or "MoE" in p.name)
               for p in s.points)


def test_engines_suite_runs_the_same_loads_on_both_engines():
    s = load("engines")
    by_engine: dict[str, set] = {}
    for p in s.points:
        assert p.kind == "serve"
        by_engine.setdefault(p.options["engine"], set()).add(str(p.options["request_rate"]))
    assert set(by_engine) == {"vllm", "transformers"} and by_engine["vllm"] == by_engine["transformers"]
    assert {"8", "inf"} <= by_engine["vllm"]


def test_the_quick_serve_step_says_what_served_it_for_either_engine():
    from llmdissect.analysis.serve_estimate import SERVED_KEYS
    from llmdissect.suites.quick_serve import served_settings

    vllm = served_settings("vllm", 1, {"max_num_seqs": 64, "max_num_batched_tokens": 1024},
                           {"block_size": "128", "num_gpu_blocks": "1365"})
    assert vllm["engine"] == "vllm" and (vllm["block_size"], vllm["num_blocks"]) == (128, 1365)
    assert (vllm["max_num_seqs"], vllm["max_batched_tokens"]) == (64, 1024)
    hf = served_settings("transformers", 1, {}, {})
    assert hf["engine"] == "transformers" and hf["num_blocks"] * hf["block_size"] == 16384
    assert all(k in vllm and k in hf for k in SERVED_KEYS)  # what validate needs to simulate the run
