"""What a serving run sends and when: the prompts (synthetic, a dataset, shared-prefix, a
trace's lengths), their send offsets, and, for multi-turn runs, the sessions they make."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llmdissect.errors import UserError
from llmdissect.workloads.serve import arrivals, prompts, sessions, shared_prefix, traces
from llmdissect.workloads.serve.serve_config import ServeConfig


@dataclass
class Plan:
    items: list[prompts.Prompt]
    """Every request's prompt (for sessions: every turn's new message, session by session)."""
    offsets: list[float]
    """Send offsets: of each request, or of each session's first turn."""
    sessions: list[sessions.Session] | None = None
    notes: dict[str, Any] = field(default_factory=dict)
    """What the record's config should also say (trace format, rows clamped, ...)."""


def check_options(cfg: ServeConfig) -> None:
    """Options that do not go together: one clear line before anything is sent."""
    if cfg.trace:
        clash = [name for name, on in (("--dataset", cfg.dataset), ("--arrivals", cfg.arrivals),
                                       ("--turns", cfg.turns > 1), ("--shared-prefixes", cfg.shared_prefixes))
                 if on]
        if clash:
            raise UserError(f"--trace sets the arrivals and the lengths; it does not go with {', '.join(clash)}")
    if cfg.shared_prefixes and cfg.dataset:
        raise UserError("--shared-prefixes builds synthetic prompts; it does not go with --dataset")


def preflight(cfg: ServeConfig) -> None:
    """Everything about the input that can be checked before a record exists (a malformed
    trace is one line and exit 2, with nothing stored)."""
    check_options(cfg)
    if cfg.trace:
        traces.read_trace(Path(cfg.trace), cfg.trace_format)


def _need(tok: prompts.Tok | None, what: str) -> prompts.Tok:
    if tok is None:
        raise UserError(f"{what} need the model's tokenizer: --tokenizer FOLDER (or --dataset FILE)")
    return tok


def build_plan(cfg: ServeConfig, tok: prompts.Tok | None) -> Plan:
    check_options(cfg)
    if cfg.trace:
        fmt, rows = traces.read_trace(Path(cfg.trace), cfg.trace_format)
        rows = rows[:cfg.num_prompts]
        items = traces.trace_prompts(_need(tok, "trace prompts"), rows, cfg.trace_block_tokens, cfg.seed)
        return Plan(items, traces.trace_offsets(rows, cfg.time_scale),
                    notes={"trace_format_read": fmt, "trace_rows": len(rows),
                           "trace_zero_lengths_sent_as_1": traces.zero_lengths(rows)})
    n_messages = cfg.num_prompts * cfg.turns
    out_len = cfg.output_len or prompts.DEFAULT_OUTPUT_LEN
    if cfg.dataset:
        items = prompts.dataset_prompts(Path(cfg.dataset), n_messages, tok, cfg.output_len, cfg.seed)
    elif cfg.shared_prefixes:  # with sessions, the prefix is each session's system prompt (first turns)
        tok = _need(tok, "synthetic prompts")
        firsts = shared_prefix.shared_prefix_prompts(tok, cfg.num_prompts, cfg.input_len, out_len,
                                                     cfg.shared_prefixes, cfg.prefix_len, cfg.prefix_fraction,
                                                     cfg.seed)
        later = prompts.synthetic_prompts(tok, n_messages - cfg.num_prompts, cfg.input_len, out_len, cfg.seed + 1)
        items = []
        for s, first in enumerate(firsts):
            items += [first, *later[s * (cfg.turns - 1):(s + 1) * (cfg.turns - 1)]]
    else:
        items = prompts.synthetic_prompts(_need(tok, "synthetic prompts"), n_messages, cfg.input_len, out_len,
                                          cfg.seed)
    offsets = (arrivals.load_offsets(Path(cfg.arrivals))[:cfg.num_prompts] if cfg.arrivals else
               arrivals.gamma_offsets(cfg.num_prompts, cfg.request_rate, cfg.burstiness, cfg.seed))
    if cfg.turns > 1:
        made = sessions.make_sessions(items, cfg.turns, offsets)
        return Plan(items[:len(made) * cfg.turns], offsets[:len(made)], made)
    return Plan(items[:len(offsets)], offsets[:len(items)])
