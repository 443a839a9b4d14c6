"""What one `bench comm` run is asked, as typed (no torch).

`CommRequest` holds the options as the user gave them (sizes as text such as "64M");
`comm_launch.build_config` checks them, with messages that name the option, and turns them
into the record's config.
"""
from __future__ import annotations

from typing import Any, Optional

from pydantic import BaseModel, ConfigDict, Field

HOOKS = ("check_offset", "die_rank", "hang_rank", "die_after_rows")
"""The test hooks `CommRequest.hooks` may hold (bench comm's hidden options set the first three)."""


class CommRequest(BaseModel):
    """What the user asked for, before validation (strings as typed on the command line)."""

    model_config = ConfigDict(extra="forbid")

    ops: str = "all_reduce"
    """Comma-separated operators (micro.collectives.OPS), or 'all'."""
    min_bytes: str = "1K"
    """Smallest size, nccl-tests' way (1K = 1024 bytes)."""
    max_bytes: str = "64M"
    """Largest size."""
    factor: int | float = 2.0
    """Each size is the previous one times this (an int stays an int in the record)."""
    dtype: str = "fp32"
    """Element type: a key of micro.collectives.DTYPES (fp32 | bf16 | fp16)."""
    iters: int = 20
    """Timed iterations per size (each checked for correctness)."""
    warmup: int = 5
    """Untimed iterations before them."""
    min_time_s: float = 0.0
    """Time a size past `iters` until its timed calls add up to this many seconds (judged from
    the fastest warm-up call), at most `max_iters`; 0 keeps exactly `iters` (nccl-tests' way)."""
    max_iters: Optional[int] = None
    """The most timed iterations `min_time_s` may reach (None: 5 x iters)."""
    passes: int = 1
    """Sweep every size this many times, each with 1/passes of the timed calls, and keep each
    size's quietest pass (the lowest median): steadier rows on a machine that others share."""
    backend: Optional[str] = None
    """gloo | nccl; None: nccl where CUDA is available, else gloo."""
    nproc: int = 2
    """Processes on this node (one per GPU with nccl)."""
    nnodes: int = 1
    """Nodes (the same command runs on each)."""
    node_rank: int = 0
    """This node's rank (the node that gets global rank 0 reports the rows)."""
    rdzv_endpoint: Optional[str] = None
    """HOST:PORT of the rendezvous, for nnodes above 1."""
    timeout_s: float = 900.0
    """Stop the whole run (every rank) after this long."""
    hooks: dict[str, Any] = Field(default_factory=dict)
    """Test hooks passed to the ranks (see llmdissect.micro.comm_child): never set by users."""
