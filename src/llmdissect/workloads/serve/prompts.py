"""Request contents: synthetic prompts of an exact token length, or a ShareGPT-style file.

Synthetic prompts are words that the tokenizer encodes as one token each (checked), so a
prompt of n words is n tokens; the tokenizer is a local folder, never downloaded.
"""
from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmdissect.errors import UserError

DEFAULT_OUTPUT_LEN = 128


@dataclass(frozen=True)
class Prompt:
    text: str
    """The user's part of the prompt."""
    input_len: int | None
    """Prompt tokens by our tokenizer (prefix included, no special tokens); None when no tokenizer."""
    output_len: int
    prefix: str = ""
    """A shared system prompt sent before `text` (completions: prepended; chat: a system message)."""
    prefix_id: int | None = None
    """Which shared prefix (shared-prefix loads), or None."""


class Tok:
    """A fast tokenizer from a local folder (tokenizer.json), light enough for the client."""

    def __init__(self, folder: Path):
        from tokenizers import Tokenizer

        path = Path(folder)
        file = path / "tokenizer.json" if path.is_dir() else path
        if not file.is_file():
            raise UserError(f"no tokenizer.json in {folder} (--tokenizer takes a local tokenizer folder)")
        try:
            self._tok = Tokenizer.from_file(str(file))
        except Exception as e:  # a corrupt file
            raise UserError(f"cannot load tokenizer {file}: {e}") from None
        self.path = str(path)
        self._words: list[str] | None = None  # word_tokens(), found once

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

    def count(self, text: str) -> int:
        return len(self.encode(text))

    def decode(self, ids: list[int]) -> str:
        return self._tok.decode(ids)

    def vocab_size(self) -> int:
        return self._tok.get_vocab_size()


def find_tokenizer(tokenizer: str | None, model: str | None) -> Tok | None:
    """`--tokenizer` if given, else the model name when it is a local folder with a tokenizer."""
    if tokenizer:
        return Tok(Path(tokenizer))
    if model and (Path(model) / "tokenizer.json").is_file():
        return Tok(Path(model))
    return None


def word_tokens(tok: Tok) -> list[str]:
    """Letter-only words that encode as exactly one token with a leading space (kept per tokenizer)."""
    if tok._words is not None:
        return tok._words
    words = []
    for i in range(tok.vocab_size()):
        w = tok.decode([i]).strip()
        if 2 <= len(w) <= 12 and w.isascii() and w.isalpha() and len(tok.encode(" " + w)) == 1:
            words.append(w)
    if len(words) < 16:
        raise UserError(f"tokenizer {tok.path} has too few one-token words to build synthetic prompts")
    tok._words = sorted(set(words))
    return tok._words


def fit_text(tok: Tok, chosen: list[str], n_tokens: int, rng: random.Random) -> str:
    """" w1 w2 ..." of exactly `n_tokens` tokens: starts from the words `chosen` and drops or
    adds words (from the tail) until the tokenizer agrees (one-token words almost always do)."""
    words = word_tokens(tok)
    text = " " + " ".join(chosen)
    for _ in range(20):
        got = tok.count(text)
        if got == n_tokens:
            break
        chosen = chosen[:-1] if got > n_tokens else chosen + [rng.choice(words)]
        text = " " + " ".join(chosen)
    return text


def synthetic_prompts(tok: Tok, n: int, input_len: int, output_len: int, seed: int = 0) -> list[Prompt]:
    """`n` prompts of exactly `input_len` tokens (checked by encoding; adjusted word by word)."""
    if input_len < 1 or output_len < 1:
        raise UserError("--input-len and --output-len must be at least 1")
    rng = random.Random(seed)
    words = word_tokens(tok)
    out = []
    for _ in range(n):
        text = fit_text(tok, rng.choices(words, k=input_len), input_len, rng)
        out.append(Prompt(text, tok.count(text), output_len))
    return out


def _turns(item: Any) -> tuple[str, str | None] | None:
    """(first user message, the reply after it) of one dataset entry."""
    if isinstance(item, dict) and isinstance(item.get("prompt"), str):
        reply = item.get("completion") or item.get("output")
        return item["prompt"], reply if isinstance(reply, str) else None
    turns = item.get("conversations") or item.get("messages") if isinstance(item, dict) else None
    if not isinstance(turns, list):
        return None
    texts = [(t.get("from") or t.get("role"), t.get("value") or t.get("content")) for t in turns if isinstance(t, dict)]
    for i, (who, text) in enumerate(texts):
        if who in ("human", "user") and isinstance(text, str) and text.strip():
            nxt = texts[i + 1][1] if i + 1 < len(texts) else None
            return text, nxt if isinstance(nxt, str) else None
    return None


def dataset_prompts(path: Path, n: int, tok: Tok | None, output_len: int | None, seed: int = 0) -> list[Prompt]:
    """`n` prompts from a local ShareGPT-style JSON list or JSONL file (shuffled by `seed`).

    The output length is `output_len` when given, else the reply's length by the tokenizer."""
    path = Path(path)
    try:
        raw = path.read_text()
    except OSError as e:
        raise UserError(f"cannot read dataset {path}: {e.strerror or e}") from None
    try:
        items = json.loads(raw)
    except ValueError:
        try:
            items = [json.loads(line) for line in raw.splitlines() if line.strip()]
        except ValueError as e:
            raise UserError(f"dataset {path} is neither JSON nor JSON Lines: {e}") from None
    if isinstance(items, dict):
        items = items.get("data") or [items]
    pairs = [p for p in (_turns(x) for x in items if isinstance(x, dict)) if p]
    if not pairs:
        raise UserError(f"dataset {path}: no entries with a user prompt (ShareGPT 'conversations' or 'prompt')")
    random.Random(seed).shuffle(pairs)
    out = []
    for i in range(n):
        text, reply = pairs[i % len(pairs)]
        want = output_len or (max(1, tok.count(reply)) if tok and reply else DEFAULT_OUTPUT_LEN)
        out.append(Prompt(text, tok.count(text) if tok else None, want))
    return out
