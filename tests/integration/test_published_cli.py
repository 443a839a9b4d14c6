"""`llmdissect validate --published` on the shipped set: deterministic, so its figures are held here."""
import json
from pathlib import Path

from conftest import assert_user_error, run_cli
from llmdissect.published.check import published_record
from llmdissect.published.points import CATEGORIES, load_points
from llmdissect.results import open_store

# The shipped set's figures on the exactly expressed points (docs/published.md); a change to
# perfmodel/ or to the set that makes either worse fails here. Raise them as the model improves.
# finetune has three exactly expressed points (NeMo AutoModel's Llama 3.1 8B and Qwen2.5 7B LoRA rows on one
# H100, 1.07x and 1.09x, and its Qwen2.5 32B PP4 x 8 virtual stages row on 16, below); torchtune's tables give
# the sequence length as a cap or run torch.compile, NeMo AutoModel's 70B rows flush their pipeline several
# times a step or run torch.compile, and the DGX Cloud recipe's rows pack SQuAD, so theirs are approximate.
# The finetune figure was 0.151 on the 8B row alone until the defaults took the GPU's architecture
# (Hopper: its MAMF's GEMM ceiling and FlashAttention-2's 35 %).
# infer and overall's within-1.25x went from 0.833 and 0.906 to 0.789 and 0.879 when TensorRT-LLM's A100
# Llama 2 70B TP4 128-token TTFT row (47 ms, predicted 0.63x) was added beside its 2048-token row: a row of
# the same table left out before, not a change to the model; approximate's from 0.613 to 0.607 with the three
# H100 FP8 rows of that table; then 0.137 and 0.620 with NeMo AutoModel's four Qwen2.5 32B LoRA rows (0.94-1.04x).
# infer 0.046/0.789 -> 0.050/0.783 and overall 0.040/0.878 -> 0.042/0.865 with the other four Llama rows of
# TensorRT-LLM v0.6.1's A100 throughput table (0.88x, 1.04x, 0.94x, and 70B TP4 batch 240 128 -> 2048 at 1.85x):
# the rest of a table the set already held, added whatever their ratio.
# With Megatron-LM's interleaved schedule modelled (--pp-virtual), SC21's 76B-530B rows express their
# --num-layers-per-virtual-pipeline-stage, and they and the 39B and 1T rows lose the vague "schedule may differ"
# gap: six rows moved from approximate to exact at 1.00-1.08x (pretrain 12 -> 18 points, median 0.034 -> 0.036);
# NeMo AutoModel's Qwen2.5 32B 16-GPU row, whose one gap was its 8 virtual stages, is exact at 1.26x (finetune
# 0.077/1.0 -> 0.087/0.667 on 3 points); approximate 0.137/0.620 -> 0.153/0.596 (the rows that left it were its
# closest, and the interleaved bubble takes NeMo's 70B rows from 1.34-1.63x to 1.56-1.76x).
# approximate 0.153/0.596 -> 0.162/0.575 with torchtitan's Table 2 (Llama 3.1 8B, FSDP x CP at 32K-256K tokens,
# Float8 and torch.compile, 1.25-2.03x), added with --cp.
# With --pp-flushes, NeMo AutoModel's 70B PP rows (8 and 2 pipeline flushes a step, the recipe's local batch)
# and its Qwen2.5 32B 8-GPU row (2) are exact: 1.65x, 1.52x, 1.53x and 1.18x (taking the recipe's local batch
# over the 70B rows' inconsistent LBS / GA columns moves them by under 4 %): finetune 3 -> 7 points,
# 0.087/0.667 -> 0.259/0.428; overall 0.045/0.863 -> 0.048/0.812; approximate 0.162/0.575 -> 0.153/0.587.
# A GPU product priced from its datasheet then took its compute time plus its weights' read, not the longer
# (roofline.gemm_unhidden_time_s): the 128-token TTFT rows 0.48-0.65x -> 0.80-1.10x, TP4 decode at 64 and 240
# sequences 1.43x -> 1.10x and 1.85x -> 1.32x; infer 0.050/0.782 -> 0.098/0.913 (its median rises: the rows the
# max priced within 5 % move 5-15 % slow, lmdeploy's 13B batch 64 to 0.78x), pretrain 0.037 -> 0.020, finetune
# 0.259/0.428 -> 0.197/0.571, overall 0.048/0.812 -> 0.058/0.896, approximate 0.153/0.587 -> 0.152/0.661.
# torchtune's ten rows that run CEWithChunkedOutputLoss express it (--loss chunked): their peak memory 1.09-1.90x ->
# 0.95-1.52x; their throughput 0-1 % lower (eight head products, each re-reading the head's weights), which takes
# the 4090 QLoRA row from 0.805x to 0.798x, just out of 1.25x: approximate 0.153/0.661 -> 0.151/0.651.
# With --float8 tensorwise, torchtitan's Table 1 and 3 compile and compile + Float8 rows (8 and 128 H100s at 500 W,
# throughput and memory) were added, all approximate (torch.compile, the 96 GB part): 1.29-1.32x throughput (the
# model's float8 speed-up, 1.275x, matches the table's 1.28x), memory 0.94-0.97x; the four Table 2 CP rows express
# Float8 and read 1.44-2.10x (were 1.25-2.03x): approximate 109 -> 117 points, 0.151/0.651 -> 0.151/0.632.
# --kernels eager|fused (training; eager, operator by operator, the default, as bench runs transformers): points that
# run torch.compile, Transformer Engine or Megatron-Core's fused kernels say fused, and torch.compile is no longer a
# gap for their time (it stays one for memory). torchtitan's compile-off rows now run eager: its A100 rows 0.94-1.06x
# -> 0.90-0.96x (pretrain 0.020 -> 0.047), its H100 FSDP rows 1.50/1.54x -> 1.28/1.32x, level with its compile rows
# (the eager / fused ratio, 1.166, against the table's 1.157). Finetune: NeMo AutoModel's rows before its norm fusion
# (PR #1120) run eager (8B 1.05 -> 0.93, Qwen 7B 1.06 -> 0.95, Qwen 32B PP 1.12/1.20 -> 1.03/1.10, 70B 1.57 -> 1.40);
# its two 70B rows after it fuse only the norm, a gap (approximate); torchtune's 8B LoRA 4090 throughput row, whose
# one gap was torch.compile, is exact at 0.72x: finetune 7 -> 6 points, 0.198/0.571 -> 0.086/0.667; overall 48 -> 47,
# 0.058/0.896 -> 0.071/0.915; approximate 117 -> 118, 0.151/0.627.
# A GPU's weight-only kernels stream at torchao's measured fraction of a 16-bit product's rate (int8 0.80, int4
# 0.53: weights.WEIGHT_STREAM_SCALE): gpt-fast's int8 rows 1.04-1.30x -> 0.84-1.05x, its int4 rows 1.25-1.85x ->
# 0.67-1.22x; LMDeploy's AWQ rows, priced with torchao's int4 kernel, 0.80-0.86x -> 0.44-0.47x (a named gap):
# approximate 0.151/0.627 -> 0.148/0.627.
# --sp, --async-tp and --prefetch express NeMo AutoModel's four FSDP2 + TP rows of 2026-04, whose only gaps they
# were; exact whatever they read (0.92-0.97x approximate before, 0.95-1.13x now): finetune 6 -> 10 points,
# 0.086/0.667 -> 0.061/0.80; overall 47 -> 51, 0.071/0.915 -> 0.066/0.922; approximate 118 -> 114, 0.148/0.627 ->
# 0.154/0.614 (four close points left it).
# Answer.AI's fsdp_qlora write-up adds 45 fine-tuning points (27 exact: dummy data cut to the context length), taken
# whole before their predictions were seen; and the GeForce parts take their own measured matmul ceiling (RTX 4090
# 1.008, RTX 3090 1.079 of the datasheet: gemm 0.81 / 0.87 where Ampere's default 0.70 stood): their throughput
# rows read 0.90-0.96x (0.82-0.87x before), torchtune's 8B LoRA 4090 row 0.72 -> 0.81x; their memory rows (peak
# *reserved*) 0.68-0.94x. finetune 10 -> 37 points, 0.061/0.80 -> 0.135/0.784; overall 51 -> 78, 0.066/0.922 ->
# 0.089/0.872; approximate 114 -> 132, 0.154/0.606.
# ZeRO-3 holds two units gathered beside its shard (trainmodel.zero3_gathered_bytes; the quick suite's FSDP x2
# memory -33 % -> -26 %): the fsdp_qlora memory rows 0.68-0.94x -> 0.70-0.96x; finetune 0.135/0.784 ->
# 0.127/0.838, overall 0.089/0.872 -> 0.089/0.897, approximate 0.155 -> 0.159 (torchtitan's FSDP memory rows).
# torchtitan's async TP and Trainy write-ups, its 405B float8 rows, the rest of its 2024-12 benchmark, torchao's
# float8 README and the PyTorch float8 + FSDP2 blog add 57 pre-training points, taken whole; one is exact (torchao's
# bf16 Llama 3 8B row on 8 H100s, 1.30x, like torchtitan's own H100 rows on their 96GB / 500 W part): pretrain 18 ->
# 19, 0.047/1.0 -> 0.055/0.947; overall 78 -> 79, 0.089/0.897 -> 0.089/0.886; approximate 138 -> 180, 0.159/0.594
# -> 0.173/0.578.
# TensorRT-LLM v0.10.0's throughput table, its rows of 128 output tokens (72; the 2048-token rows wait for a faster
# serving simulation): the first exact serving points, the FP16 columns (30; FP8 ones carry "TensorRT-LLM fused
# kernels"): serve 0 -> 30 points, 0.090/0.933; overall 79 -> 109, 0.089/0.886 -> 0.090/0.899; approximate 180 ->
# 222, 0.189/0.561 -> 0.194/0.541.
# Completing the tables the set took rows from (TensorRT-LLM's performance.md, H200launch.md, Falcon180B-H200.md and
# v0.9.0 perf overview; LMDeploy's a100_fp16.md; gpt-fast's README; DGX Cloud's fine-tuning tables): 175 points,
# every remaining row; LMDeploy rows whose batch's KV cache and weights exceed 80 GB (TurboMind queues part of the
# batch) are approximate, two shipped ones too: infer 23 -> 90 points, 0.098/0.913 -> 0.102/0.922; overall 109 ->
# 176, 0.090/0.899 -> 0.092/0.909; approximate 222 -> 320, 0.194/0.541 -> 0.183/0.569.
# Completing Megatron-Core's model table (5 pipeline rows) and llm-foundry's four tables (187 rows), approximate, and
# NeMo AutoModel's LoRA table (its 70B 2-node row as first printed, exact, 1.375x like its 8-GPU sibling): finetune
# 37 -> 38, 0.127/0.838 -> 0.128/0.816; overall 176 -> 177, 0.092/0.909 -> 0.093/0.904; approximate 320 -> 512,
# 0.183/0.569 -> 0.199/0.553.
# --held-logits fp32: fsdp_qlora's train.py keeps the model output through backward and its transformers (early
# 2024) upcast the logits in the forward; its 20 memory rows 0.68-0.98x -> 0.79-1.03x (the rest of the gap is the
# allocator's reserved memory, which they report): finetune 0.128/0.816 -> 0.076/0.921; overall 0.093/0.904 ->
# 0.089/0.927.
# published.bounds: TensorRT-LLM v0.9.0's Mixtral A100 row of batch 32 needs 1.14x the A100's peak bandwidth for its
# weights under uniform routing (its benchmark's batches reach fewer experts): the table's 18 Mixtral rows are
# approximate for it (6 were exact, 0.48-1.77x): infer 90 -> 84 points, 0.102/0.922 -> 0.098/0.952; overall 177 ->
# 171, 0.089/0.927 -> 0.087/0.942; approximate 512 -> 518, 0.199/0.553 -> 0.199/0.552.
# LoRA layers save what autograd keeps with a frozen base (activations.lora_layer_delta_bytes; within 3 % of PEFT's
# live tensors, the quick suite's LoRA memory +12 % -> +1 %): fsdp_qlora's memory rows move -4 % to +3 % (their
# recomputed layer: no normalized tensors, but dropout's copies): finetune 0.076/0.921 -> 0.077/0.921.
HELD = {"infer": {"median_abs_error": 0.099, "within_1.25x": 0.952},
        "pretrain": {"median_abs_error": 0.056, "within_1.25x": 0.947},
        "finetune": {"median_abs_error": 0.078, "within_1.25x": 0.921},
        "serve": {"median_abs_error": 0.090, "within_1.25x": 0.933}}
OVERALL = {"median_abs_error": 0.087, "within_1.25x": 0.941}
# NeMo AutoModel's pre-training table adds 11 points (6 approximate: DeepEP, FlexAttention, DeepSeek V3's uneven
# virtual stages, ...; 5 models not presets): approximate 132 -> 138, 0.155/0.606 -> 0.156/0.594.
# --head: under TP the loss's tensors follow the head (vocabulary-parallel by default, as the time already was;
# NeMo AutoModel's TP rows gathered: 1.40 -> 1.40, 1.02 -> 1.02): torchtitan's 70B TP 8 memory rows 232 -> 60 GiB
# (published 72 / 68), its 405B PP 8 TP 8 rows 82 -> 39 GiB (published 75-85: their match was the whole logits'):
# approximate 0.173/0.578 -> 0.189/0.561.
APPROXIMATE = {"median_abs_error": 0.199, "within_1.25x": 0.552}


def test_every_shipped_point_has_its_source_and_loads():
    points = load_points()
    assert len(points) >= 150
    for p in points:
        assert p.source.startswith("https://") and p.quote and p.where, p.id
        assert p.expressible or p.missing, f"{p.id}: neither estimate options nor what is missing"


def test_figures_do_not_regress_and_no_mfu_above_1():
    record, outcomes = published_record()
    s = record.metrics["summary"]
    for group, held in [*((c, HELD[c]) for c in HELD), ("overall", OVERALL), ("approximate", APPROXIMATE)]:
        got = s[group] if group in ("overall", "approximate") else s["per_category"][group]
        assert got["median_abs_error"] <= held["median_abs_error"] + 1e-9, (group, got)
        assert got["within_1.25x"] >= held["within_1.25x"] - 1e-9, (group, got)
    assert s["mfu_above_1"] == []
    assert all(o.reason for o in outcomes if o.predicted is None)
    # the bound, per category and overall: >= 90 % within 1.25x, median |error| <= 10 %
    for got in [*s["per_category"].values(), s["overall"]]:
        assert got["within_1.25x"] >= 0.90 and got["median_abs_error"] <= 0.10, got
    assert s["beyond_peak_bandwidth"] == ["trtllm090-mixtral-8x7b-fp16-a100-tp2-bs32-2048-2048"]


def test_cli_prints_stores_and_filters(db_path: Path):
    proc = run_cli("validate", "--published", "--category", "infer", "--db", str(db_path), check=True)
    assert "Published vs predicted" in proc.stdout and "within 1.25x" in proc.stdout
    assert "gptfast-llama2-7b-bf16-a100-bs1" in proc.stdout
    assert "beyond the peak bandwidth: trtllm090-mixtral-8x7b-fp16-a100-tp2-bs32-2048-2048 needs 1.14x" in proc.stdout
    with open_store(db_path) as store:
        (rec,) = store.query(kind="validation")
    assert rec.config == {"set": "published", "category": "infer"}
    assert {p["category"] for p in rec.metrics["points"]} == {"infer"}
    out = json.loads(run_cli("validate", "--published", "--json", "--db", str(db_path), check=True).stdout)
    assert {p["category"] for p in out["metrics"]["points"]} <= set(CATEGORIES)
    assert len(out["metrics"]["points"]) == len(load_points())


def test_bad_options_are_one_line(db_path: Path):
    assert_user_error(run_cli("validate", "--published", "--category", "training", "--db", str(db_path)),
                      "unknown category 'training'")
    assert_user_error(run_cli("validate", "--category", "infer", "--db", str(db_path)), "--published only")
    assert_user_error(run_cli("validate", "--published", "--suite", "quick", "--db", str(db_path)), "drop --suite")


def test_the_report_shows_the_newest_validation():
    from llmdissect.report.sections_estimate import published

    record, outcomes = published_record("infer")
    sec = published([record])
    assert sec is not None and sec.title == "Estimates against published results"
    assert [p.name for p in sec.plots] == ["published-vs-predicted"]
    every = next(t for t in sec.tables if t.title == "Every predicted point")
    assert len(every.rows) == sum(o.predicted is not None for o in outcomes)
    assert published([]) is None
