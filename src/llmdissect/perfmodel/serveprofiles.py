"""Scheduler profiles of the serving engines `estimate serve` simulates (perfmodel.servesim).

Each profile is a named set of the scheduler's parameters with the engine's documented
defaults and where they come from. `num_blocks` 0 means "as many KV blocks as the memory
left beside the weights holds" (servestep.kv_blocks_that_fit).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from llmdissect.errors import UserError


@dataclass(frozen=True)
class SchedulerProfile:
    """How an engine forms each iteration's batch."""

    name: str
    max_num_seqs: int
    """Sequences running at once (0: as many as the KV cache holds)."""
    max_batched_tokens: int
    """Tokens (prefill chunks plus one per decoding sequence) in one iteration."""
    block_size: int
    """Tokens per KV-cache block (paged attention)."""
    chunked_prefill: bool = True
    """A prompt longer than what is left of the token budget is split over iterations."""
    prefix_caching: bool = False
    """Full blocks of a shared prefix computed once are reused by later requests."""
    prefill_first: bool = False
    """Prefill batches run alone and before decodes (SGLang); else decodes go first and
    prefills fill the rest of the budget (vLLM, transformers' FIFO scheduler)."""
    safety_margin: float = 0.0
    """No new prompt is admitted while fewer than this fraction of the blocks are free."""
    num_blocks: int = 0
    """KV-cache blocks (0: from the memory left beside the weights)."""
    source: str = ""

    def with_overrides(self, **overrides: Any) -> SchedulerProfile:
        """The profile with the options a user set (None leaves a field as it is)."""
        given = {k: v for k, v in overrides.items() if v is not None}
        unknown = set(given) - set(self.__dataclass_fields__)
        if unknown:
            raise UserError(f"unknown scheduler setting(s): {', '.join(sorted(unknown))}")
        p = replace(self, **given)
        if p.max_batched_tokens < 1 or p.block_size < 1 or p.max_num_seqs < 0 or p.num_blocks < 0:
            raise UserError("scheduler settings must be positive (--max-num-seqs may be 0: memory-bound)")
        if not 0 <= p.safety_margin < 1:
            raise UserError(f"--safety-margin must be in [0, 1), got {p.safety_margin}")
        return p

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


PROFILES: dict[str, SchedulerProfile] = {
    # vllm/engine/arg_utils.py EngineArgs.get_batch_defaults (OpenAI API server, a GPU under
    # 70 GiB or an A100: 2048 tokens and 256 sequences; 8192 and 1024 above); the V1 engine
    # always chunks prefills and caches prefixes; CUDA's default block size is 16.
    "vllm": SchedulerProfile("vllm", max_num_seqs=256, max_batched_tokens=2048, block_size=16,
                             chunked_prefill=True, prefix_caching=True,
                             source="vLLM V1 defaults (vllm/engine/arg_utils.py get_batch_defaults; "
                                    "GPUs under 70 GiB and A100s: 2048 tokens, 256 sequences)"),
    "vllm-large": SchedulerProfile("vllm-large", max_num_seqs=1024, max_batched_tokens=8192, block_size=16,
                                   chunked_prefill=True, prefix_caching=True,
                                   source="vLLM V1 defaults on GPUs of 70 GiB and more but A100s (H100, H200: "
                                          "8192 tokens, 1024 sequences)"),
    # sglang/srt/server_args.py: chunked_prefill_size 8192 on GPUs of 35-160 GB (2048 below);
    # page size 1; the radix cache on; prefill batches are formed first and run on their own
    # (mixed chunks are off by default); running requests bounded by the memory pool.
    "sglang": SchedulerProfile("sglang", max_num_seqs=0, max_batched_tokens=8192, block_size=1,
                               chunked_prefill=True, prefix_caching=True, prefill_first=True,
                               source="SGLang defaults (sglang/srt/server_args.py: chunked_prefill_size 8192 "
                                      "on 35-160 GB GPUs, page_size 1, radix cache, no mixed chunks)"),
    # transformers/generation/continuous_batching/scheduler.py FIFOScheduler: decoding requests
    # first, then prefills split to the token budget; a safety margin of 15 % of free blocks;
    # block size, block count and token budget as `serve-local` starts it
    # (workloads/serve/local_server.py: --cb-block-size 32, 16384 tokens, 512 per step).
    "transformers": SchedulerProfile("transformers", max_num_seqs=0, max_batched_tokens=512, block_size=32,
                                     chunked_prefill=True, prefix_caching=False, safety_margin=0.15,
                                     num_blocks=512,
                                     source="transformers serve --continuous-batching (FIFOScheduler, safety "
                                            "margin 0.15) as serve-local starts it: 512 blocks of 32 tokens, "
                                            "512 tokens per step"),
}


def get_profile(name: str) -> SchedulerProfile:
    try:
        return PROFILES[name]
    except KeyError:
        raise UserError(f"unknown scheduler profile {name!r}; choose one of {', '.join(PROFILES)}") from None
