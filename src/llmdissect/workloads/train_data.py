"""Token batches for training benchmarks: synthetic (fixed seed) or a local JSONL of texts.

The global batch (micro_batch x data-parallel size rows per micro-step) is drawn the same
way on every rank and each rank takes its rows, so one seed gives one global batch whatever
the number of processes: single, DDP and FSDP see the same data and the same first loss.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from llmdissect.errors import UserError


def global_token_count(grad_accum: int, micro_batch: int, world: int, seq: int) -> int:
    return grad_accum * micro_batch * world * seq


def synthetic_global_batch(vocab: int, grad_accum: int, micro_batch: int, world: int, seq: int, seed: int):
    """Random token ids, never zeros: shape [grad_accum, micro_batch * world, seq]."""
    import torch

    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (grad_accum, micro_batch * world, seq), generator=g)


def read_texts(path: Path) -> list[str]:
    texts = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                item = json.loads(line)
            except json.JSONDecodeError as e:
                raise UserError(f"{path}:{n}: not JSON ({e.msg})") from None
            text = item.get("text") if isinstance(item, dict) else item if isinstance(item, str) else None
            if not isinstance(text, str):
                raise UserError(f"{path}:{n}: expected a string or an object with a 'text' field")
            texts.append(text)
    if not texts:
        raise UserError(f"{path}: no texts")
    return texts


def load_or_train_tokenizer(texts: list[str], tokenizer: str | None, vocab: int) -> Any:
    """A local tokenizer (folder or tokenizer.json), or a byte-level BPE trained on `texts`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    if tokenizer is not None:
        p = Path(tokenizer)
        return Tokenizer.from_file(str(p / "tokenizer.json" if p.is_dir() else p))
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=vocab, show_progress=False,
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return tok


def file_global_batch(path: str, tokenizer: str | None, vocab: int, grad_accum: int, micro_batch: int,
                      world: int, seq: int):
    """The texts tokenized, concatenated and cut into rows of `seq` (repeated if short)."""
    import torch

    texts = read_texts(Path(path))
    tok = load_or_train_tokenizer(texts, tokenizer, vocab)
    ids = [i for t in texts for i in tok.encode(t).ids]
    if not ids:
        raise UserError(f"{path}: the tokenizer produced no tokens")
    if max(ids) >= vocab:
        raise UserError(f"tokenizer ids reach {max(ids)}, beyond the model's vocabulary of {vocab}")
    need = global_token_count(grad_accum, micro_batch, world, seq)
    flat = torch.tensor((ids * (need // len(ids) + 1))[:need], dtype=torch.long)
    return flat.view(grad_accum, micro_batch * world, seq)


def rank_rows(batch, rank: int, micro_batch: int):
    """This rank's rows of the global batch: [grad_accum, micro_batch, seq]."""
    return batch[:, rank * micro_batch:(rank + 1) * micro_batch].contiguous()
