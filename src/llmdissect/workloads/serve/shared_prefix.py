"""Shared-prefix loads: a few system prompts, each shared by many requests (agents, chat apps
with one system prompt), so that a server's prefix cache has something to hit.

Parameters (`bench serve` options): `--shared-prefixes N` distinct prefixes of
`--prefix-len L` tokens each; `--prefix-fraction F` of the requests carry one. Exactly
round(F * n) requests get a prefix (which ones is drawn by the seed), the prefixes taken in
turn so that each is shared by as equal a number of requests as possible; every request's
own part is `--input-len` tokens of synthetic words, different for each request.
"""
from __future__ import annotations

import random

from llmdissect.errors import UserError
from llmdissect.workloads.serve.prompts import Prompt, Tok, fit_text, synthetic_prompts, word_tokens


def prefix_texts(tok: Tok, n_prefixes: int, prefix_len: int, seed: int = 0) -> list[str]:
    """`n_prefixes` distinct texts of exactly `prefix_len` tokens (a seed of their own)."""
    rng = random.Random(f"prefix:{seed}")
    words = word_tokens(tok)
    return [fit_text(tok, rng.choices(words, k=prefix_len), prefix_len, rng) for _ in range(n_prefixes)]


def prefixed_count(n: int, fraction: float) -> int:
    """How many of `n` requests carry a shared prefix: round(fraction * n), halves up."""
    return int(fraction * n + 0.5)


def shared_prefix_prompts(tok: Tok, n: int, input_len: int, output_len: int, n_prefixes: int,
                          prefix_len: int, fraction: float, seed: int = 0) -> list[Prompt]:
    """`n` prompts: each has its own `input_len` tokens; `prefixed_count(n, fraction)` of them
    start with one of `n_prefixes` shared prefixes of `prefix_len` tokens."""
    if n_prefixes < 1 or prefix_len < 1:
        raise UserError("--shared-prefixes and --prefix-len must be at least 1 for a shared-prefix load")
    if not 0.0 <= fraction <= 1.0:
        raise UserError(f"--prefix-fraction must be between 0 and 1, got {fraction}")
    own = synthetic_prompts(tok, n, input_len, output_len, seed)
    prefixes = prefix_texts(tok, n_prefixes, prefix_len, seed)
    chosen = sorted(random.Random(f"pick:{seed}").sample(range(n), prefixed_count(n, fraction)))
    which = {req: k % n_prefixes for k, req in enumerate(chosen)}
    out = []
    for i, p in enumerate(own):
        if i in which:
            pid = which[i]
            out.append(Prompt(p.text, prefix_len + input_len, output_len, prefixes[pid], pid))
        else:
            out.append(p)
    return out
