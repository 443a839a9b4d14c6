"""One vocabulary: the record kinds and the metric names, each written out once.

docs/metrics.md defines every number; the comment beside each name says where. Writers
(workloads, micro, perfmodel) store a metric under its name here and readers (analysis,
report, suites, cli) look it up by the same name, so the two cannot drift apart, and
tests/unit/test_metric_names.py checks that these are exactly the names the doc defines.
A metric the doc does not define keeps its literal where it is written. Bottom layer:
this module imports nothing.
"""
from __future__ import annotations

# --- Record kinds: a record's `kind` (docs/metrics.md "Records") ---------------------------
PRETRAIN = "pretrain"
FINETUNE = "finetune"
INFER = "infer"
SERVE = "serve"
OPS = "ops"
COMM = "comm"
ESTIMATE = "estimate"
PLAN = "plan"
VALIDATION = "validation"  # validate --published: every published point against its estimate
KINDS = (PRETRAIN, FINETUNE, INFER, SERVE, OPS, COMM, ESTIMATE, PLAN, VALIDATION)
TRAIN_KINDS = (PRETRAIN, FINETUNE)

# --- Training: pretrain, finetune (docs/metrics.md "Training") ----------------------------
STEP_TIME_S = "step_time_s"  # Stats: one optimizer step, all micro-batches, device-synchronized
FORWARD_S = "forward_s"  # Stats: the forward part of a step (also an estimate's time.forward_s)
BACKWARD_S = "backward_s"  # Stats: the backward part of a step (also time.backward_s)
OPTIMIZER_S = "optimizer_s"  # Stats: the optimizer part of a step (also time.optimizer_s)
COMM_S = "comm_s"  # Stats: communication, where the engine lets it be separated (also time.comm_s)
TOKENS_PER_S = "tokens_per_s"  # global tokens per step / median step time
TOKENS_PER_S_PER_DEVICE = "tokens_per_s_per_device"  # tokens_per_s / devices
DEVICES = "devices"  # the devices tokens_per_s_per_device and mfu divide by (1 on a CPU)
MODEL_FLOPS_PER_TOKEN = "model_flops_per_token"  # PaLM's 6 N + 12 L d_attn s (4 N + 6 N_lora for LoRA)
MFU = "mfu"  # tokens_per_s x model_flops_per_token / (peak_flops_per_s x devices)
HFU = "hfu"  # mfu with the recomputed forward counted
PEAK_MEMORY_BYTES = "peak_memory_bytes"  # CUDA max_memory_allocated (max over ranks); CPU peak live tensors
PEAK_RESERVED_BYTES = "peak_reserved_bytes"  # CUDA max_memory_reserved, beside peak_memory_bytes
PEAK_RSS_BYTES = "peak_rss_bytes"  # process resident set, beside peak_memory_bytes on a CPU
LOSS = "loss"  # per-step loss values
TRAIN_METRICS = (STEP_TIME_S, FORWARD_S, BACKWARD_S, OPTIMIZER_S, COMM_S, TOKENS_PER_S, TOKENS_PER_S_PER_DEVICE,
                 DEVICES, MODEL_FLOPS_PER_TOKEN, MFU, HFU, PEAK_MEMORY_BYTES, PEAK_RESERVED_BYTES, PEAK_RSS_BYTES,
                 LOSS)

# --- Inference: infer, serve (docs/metrics.md "Inference") --------------------------------
TTFT_S = "ttft_s"  # Stats: submit -> first output token at the caller (also an estimate's time.ttft_s)
TPOT_S = "tpot_s"  # Stats: per request (e2e - ttft) / (output_tokens - 1) (also time.tpot_s)
ITL_S = "itl_s"  # Stats: gaps between streamed chunks, k samples of gap / k for a k-token chunk
E2E_LATENCY_S = "e2e_latency_s"  # Stats: submit -> last token
DURATION_S = "duration_s"  # first request sent -> last response finished
REQUEST_THROUGHPUT_PER_S = "request_throughput_per_s"  # completed / duration
OUTPUT_TOKENS_PER_S = "output_tokens_per_s"  # output tokens / duration
TOTAL_TOKENS_PER_S = "total_tokens_per_s"  # (input + output tokens) / duration
GOODPUT_PER_S = "goodput_per_s"  # completed requests meeting every SLO / duration (DistServe)
PREFIX_CACHE_HIT_RATE = "prefix_cache_hit_rate"  # cached prompt tokens / prompt tokens (server's usage)
CAPACITY_REQUEST_RATE_PER_S = "capacity_request_rate_per_s"  # highest probed rate meeting every SLO target
CAPACITY_CONCURRENCY = "capacity_concurrency"  # highest probed concurrency cap meeting every SLO target
USD_PER_MILLION_INPUT_TOKENS = "usd_per_million_input_tokens"  # usd_per_hour * duration / 3600 / input tokens * 1e6
USD_PER_MILLION_OUTPUT_TOKENS = "usd_per_million_output_tokens"  # likewise, over output tokens
USD_PER_MILLION_TRAINING_TOKENS = "usd_per_million_training_tokens"  # usd_per_hour / 3600 / tokens_per_s * 1e6
ENERGY_J = "energy_j"  # RAPL packages + NVML GPUs of this machine over the timed region
ENERGY_J_PER_OUTPUT_TOKEN = "energy_j_per_output_token"  # energy_j / output tokens
ENERGY_J_PER_TRAINING_TOKEN = "energy_j_per_training_token"  # energy_j / tokens of the timed steps
PREFILL_TOKENS_PER_S = "prefill_tokens_per_s"  # offline: prompt tokens / timed prefill
DECODE_TOKENS_PER_S = "decode_tokens_per_s"  # offline: generated tokens / timed decode steps
KV_CACHE_BYTES = "kv_cache_bytes"  # the cache tensors actually allocated (also memory.kv_cache_bytes)
INFER_METRICS = (TTFT_S, TPOT_S, E2E_LATENCY_S, PREFILL_TOKENS_PER_S, DECODE_TOKENS_PER_S, KV_CACHE_BYTES,
                 PEAK_MEMORY_BYTES, PEAK_RSS_BYTES)
SERVE_METRICS = (TTFT_S, TPOT_S, ITL_S, E2E_LATENCY_S, DURATION_S, REQUEST_THROUGHPUT_PER_S, OUTPUT_TOKENS_PER_S,
                 TOTAL_TOKENS_PER_S, GOODPUT_PER_S, PREFIX_CACHE_HIT_RATE,
                 CAPACITY_REQUEST_RATE_PER_S, CAPACITY_CONCURRENCY, USD_PER_MILLION_INPUT_TOKENS,
                 USD_PER_MILLION_OUTPUT_TOKENS, ENERGY_J, ENERGY_J_PER_OUTPUT_TOKEN)
COST_METRICS = (USD_PER_MILLION_INPUT_TOKENS, USD_PER_MILLION_OUTPUT_TOKENS, USD_PER_MILLION_TRAINING_TOKENS,
                ENERGY_J, ENERGY_J_PER_OUTPUT_TOKEN, ENERGY_J_PER_TRAINING_TOKEN)
"""Cost and energy per token (workloads/cost.py, measure/energy.py), for serve, infer and training."""

# --- Operators: each row of an ops record (docs/metrics.md "Operators (ops)") -------------
TIME_S = "time_s"  # Stats: one call of the operator (a collective's row too)
FLOPS = "flops"  # FLOPs of one call
BYTES = "bytes"  # the fewest bytes that must move: each input read once, each output written once
INTENSITY = "intensity"  # flops / bytes
FLOPS_PER_S = "flops_per_s"  # flops / median time
BYTES_PER_S = "bytes_per_s"  # bytes / median time
PEAK_FRACTION = "peak_fraction"  # max(flops_per_s / peak FLOP/s, bytes_per_s / peak bytes/s)
OPS_ROW_METRICS = (TIME_S, FLOPS, BYTES, INTENSITY, FLOPS_PER_S, BYTES_PER_S, PEAK_FRACTION)

# --- Collectives: comm, as nccl-tests defines them (docs/metrics.md "Collectives") --------
SIZE_BYTES = "size_bytes"  # count x dtype size of the operation's larger buffer
COUNT = "count"  # elements of the larger buffer
ALGBW_BYTES_PER_S = "algbw_bytes_per_s"  # size / time
BUSBW_BYTES_PER_S = "busbw_bytes_per_s"  # algbw x the operator's factor (all_reduce 2(n-1)/n, ...)
WRONG = "wrong"  # elements that differed from the expected values
AVG_BUSBW_BYTES_PER_S = "avg_busbw_bytes_per_s"  # mean busbw over all rows of a run
ALPHA_S = "alpha_s"  # alpha-beta fit: time_s = alpha_s + beta_s_per_byte x size_bytes
BETA_S_PER_BYTE = "beta_s_per_byte"  # alpha-beta fit, seconds per byte
FIT_ERROR = "fit_error"  # root mean square relative error of the fitted times
FIT_MAX_ERROR = "fit_max_error"  # largest relative error of the fitted times
COMM_ROW_METRICS = (SIZE_BYTES, COUNT, TIME_S, ALGBW_BYTES_PER_S, BUSBW_BYTES_PER_S, WRONG)
COMM_METRICS = (AVG_BUSBW_BYTES_PER_S,)
COMM_FIT_METRICS = (ALPHA_S, BETA_S_PER_BYTE, FIT_ERROR, FIT_MAX_ERROR)

# --- Estimates: `memory.<x>_bytes`, `time.<x>_s` (docs/metrics.md "Estimates") ------------
MEMORY = "memory"  # per-device bytes, the keys of MEMORY_METRICS
TIME = "time"  # per-step (training) or per-request (inference) seconds, TRAIN_TIME_METRICS or INFER_TIME_METRICS
PARAMS_BYTES = "params_bytes"  # memory.params_bytes: weights
GRADS_BYTES = "grads_bytes"  # memory.grads_bytes: gradients
OPTIMIZER_BYTES = "optimizer_bytes"  # memory.optimizer_bytes: optimizer states
ACTIVATIONS_BYTES = "activations_bytes"  # memory.activations_bytes
OTHER_BYTES = "other_bytes"  # memory.other_bytes: framework allowance
TOTAL_BYTES = "total_bytes"  # memory.total_bytes: all of the above, compared with device memory
STEP_S = "step_s"  # time.step_s: one optimizer step
FITS = "fits"  # total_bytes <= device memory
MEMORY_METRICS = (PARAMS_BYTES, GRADS_BYTES, OPTIMIZER_BYTES, ACTIVATIONS_BYTES, KV_CACHE_BYTES, OTHER_BYTES,
                  TOTAL_BYTES)
TRAIN_TIME_METRICS = (STEP_S, FORWARD_S, BACKWARD_S, OPTIMIZER_S, COMM_S)
INFER_TIME_METRICS = (TTFT_S, TPOT_S)
ESTIMATE_METRICS = (MEMORY, TIME, TOKENS_PER_S, MFU, FITS, MODEL_FLOPS_PER_TOKEN)

# --- Validation: measured against predicted (analysis/validate.py, docs/developing.md) ----
# training step_time_s ~ time.step_s, tokens_per_s, peak_memory_bytes ~ memory.total_bytes - other_bytes;
# inference ttft_s ~ time.ttft_s, tpot_s ~ time.tpot_s, decode_tokens_per_s, peak_memory_bytes;
# collectives busbw_bytes_per_s per row.
VALIDATED_TRAIN = (STEP_TIME_S, TOKENS_PER_S, PEAK_MEMORY_BYTES)
VALIDATED_INFER = (TTFT_S, TPOT_S, DECODE_TOKENS_PER_S, PEAK_MEMORY_BYTES)
VALIDATED_COMM = (BUSBW_BYTES_PER_S,)
# a simulated serving run (estimate serve): what its engine did, under metrics.engine
ENGINE = "engine"
ITERATIONS = "iterations"
MEAN_BATCH_SIZE = "mean_batch_size"  # sequences per iteration
KV_BLOCKS = "kv_blocks"
KV_CACHE_USE_MEAN = "kv_cache_use_mean"  # fraction of the blocks in use, mean over iterations
KV_CACHE_USE_MAX = "kv_cache_use_max"
PREEMPTIONS = "preemptions"
PREFIX_HIT_TOKENS = "prefix_hit_tokens"  # prompt tokens served from the prefix cache
SERVE_ENGINE_METRICS = (ENGINE, ITERATIONS, MEAN_BATCH_SIZE, KV_BLOCKS, KV_CACHE_USE_MEAN, KV_CACHE_USE_MAX,
                        PREEMPTIONS, PREFIX_HIT_TOKENS)
# a measured serving run: what the server's Prometheus /metrics said during it (server_metrics.py)
SERVER_METRICS = "server_metrics"
SERVER_METRICS_NOT_AVAILABLE = "server_metrics_not_available"
SERVER_SIDE = (SERVER_METRICS, SERVER_METRICS_NOT_AVAILABLE)
# serving: the medians of ttft_s and tpot_s, named apart from offline inference's, and the throughput
SERVE_TTFT_P50_S = "serve_ttft_p50_s"
SERVE_TPOT_P50_S = "serve_tpot_p50_s"
VALIDATED_SERVE = (SERVE_TTFT_P50_S, SERVE_TPOT_P50_S, REQUEST_THROUGHPUT_PER_S)
VALIDATED = tuple(dict.fromkeys(VALIDATED_TRAIN + VALIDATED_INFER + VALIDATED_SERVE + VALIDATED_COMM))
"""Every validated metric, in the order validate's summary lists them."""
