"""Replay of recorded request traces: when each request came, its input and output lengths,
and (Mooncake) which blocks of its prompt it shares with others.

Formats (`--trace-format`, or auto by the file):
- mooncake: JSON Lines, one request a line: `timestamp` (milliseconds), `input_length`,
  `output_length`, optional `hash_ids` (one id per block of `--trace-block-tokens` prompt
  tokens, 512 in Mooncake's traces; equal ids mean equal blocks).
- azure: the Azure LLM inference trace CSV: `TIMESTAMP` (date and time, e.g.
  2023-11-16 18:15:46.6805900), `ContextTokens`, `GeneratedTokens`.
- burstgpt: the BurstGPT CSV: `Timestamp` (seconds), `Request tokens`, `Response tokens`
  (other columns, such as Model and Log Type, are read past).

Send offsets are the recorded times less the first, times `--time-scale` (1: as recorded,
0.5: twice as fast). Prompts are synthetic words of exactly the recorded input length; a
hash id always becomes the same block of words, so requests that share ids share a token
prefix. A length of 0 (BurstGPT's failed requests) is sent as 1, and the record counts them.
"""
from __future__ import annotations

import csv
import json
import random
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from llmdissect.errors import UserError
from llmdissect.workloads.serve.prompts import Prompt, Tok, fit_text, word_tokens

FORMATS = ("auto", "mooncake", "azure", "burstgpt")
CSV_COLUMNS = {"azure": ("TIMESTAMP", "ContextTokens", "GeneratedTokens"),
               "burstgpt": ("Timestamp", "Request tokens", "Response tokens")}
MOONCAKE_BLOCK_TOKENS = 512
SAMPLES = Path(__file__).with_name("samples")
"""Small synthetic traces in each format (made up for the tests, not recorded anywhere)."""
SAMPLE_FILES = {"mooncake": SAMPLES / "mooncake_sample.jsonl", "azure": SAMPLES / "azure_sample.csv",
                "burstgpt": SAMPLES / "burstgpt_sample.csv"}


@dataclass(frozen=True)
class TraceRow:
    time_s: float
    """Recorded arrival, seconds (on the trace's own clock)."""
    input_len: int
    output_len: int
    hash_ids: tuple[int, ...] = ()


def _int(value: object, what: str, where: str) -> int:
    if isinstance(value, bool):
        raise UserError(f"{where}: {what} must be a whole number, got {value!r}")
    try:
        n = int(str(value).strip()) if not isinstance(value, int) else value
    except ValueError:
        raise UserError(f"{where}: {what} must be a whole number, got {value!r}") from None
    if n < 0:
        raise UserError(f"{where}: {what} must not be negative, got {n}")
    return n


def _azure_time(text: str, where: str) -> float:
    """'2023-11-16 18:15:46.6805900' -> POSIX seconds (7 fraction digits: more than datetime takes)."""
    head, _, frac = text.strip().partition(".")
    try:
        t = datetime.strptime(head, "%Y-%m-%d %H:%M:%S").timestamp()
        return t + (float("0." + frac) if frac else 0.0)
    except ValueError:
        raise UserError(f"{where}: TIMESTAMP {text!r} is not 'YYYY-MM-DD HH:MM:SS.fraction'") from None


def _mooncake(path: Path, text: str) -> list[TraceRow]:
    rows = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"trace {path} line {n}"
        try:
            obj = json.loads(line)
        except ValueError as e:
            raise UserError(f"{where} is not JSON: {e}") from None
        if not isinstance(obj, dict):
            raise UserError(f"{where}: expected an object with timestamp, input_length, output_length")
        missing = [k for k in ("timestamp", "input_length", "output_length") if k not in obj]
        if missing:
            raise UserError(f"{where}: no {', '.join(missing)} (Mooncake JSONL: timestamp in ms, input_length, "
                            f"output_length, hash_ids)")
        ids = obj.get("hash_ids", [])
        if not isinstance(ids, list):
            raise UserError(f"{where}: hash_ids must be a list of whole numbers")
        try:
            stamp = float(obj["timestamp"])
        except (TypeError, ValueError):
            raise UserError(f"{where}: timestamp must be a number of milliseconds") from None
        rows.append(TraceRow(stamp / 1000.0, _int(obj["input_length"], "input_length", where),
                             _int(obj["output_length"], "output_length", where),
                             tuple(_int(h, "a hash id", where) for h in ids)))
    return rows


def _csv(path: Path, text: str, fmt: str) -> tuple[str, list[TraceRow]]:
    reader = csv.DictReader(text.splitlines())
    header = [h.strip() for h in (reader.fieldnames or [])]
    if fmt == "auto":
        fmt = next((f for f, cols in CSV_COLUMNS.items() if set(cols) <= set(header)), "")
        if not fmt:
            known = "; ".join(f"{f}: {', '.join(c)}" for f, c in CSV_COLUMNS.items())
            raise UserError(f"trace {path}: columns {', '.join(header) or '(none)'} match no known format ({known})")
    when, n_in, n_out = CSV_COLUMNS[fmt]
    missing = [c for c in (when, n_in, n_out) if c not in header]
    if missing:
        raise UserError(f"trace {path}: no column {', '.join(missing)} for format {fmt} "
                        f"(found {', '.join(header) or 'none'})")
    reader.fieldnames = header
    rows = []
    for n, rec in enumerate(reader, 2):
        where = f"trace {path} line {n}"
        if None in rec or any(rec.get(c) is None for c in (when, n_in, n_out)):
            raise UserError(f"{where}: {len([v for v in rec.values() if v is not None])} fields, "
                            f"the header has {len(header)}")
        if fmt == "azure":
            t = _azure_time(rec[when], where)
        else:
            try:
                t = float(rec[when])
            except ValueError:
                raise UserError(f"{where}: {when} must be a number of seconds, got {rec[when]!r}") from None
        rows.append(TraceRow(t, _int(rec[n_in], n_in, where), _int(rec[n_out], n_out, where)))
    return fmt, rows


def read_trace(path: Path, fmt: str = "auto") -> tuple[str, list[TraceRow]]:
    """(format, rows sorted by time) of a trace file; any fault is one UserError line."""
    path = Path(path)
    if fmt not in FORMATS:
        raise UserError(f"--trace-format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    try:
        text = path.read_text(encoding="utf-8-sig")  # spreadsheet exports start with a BOM
    except OSError as e:
        raise UserError(f"cannot read trace {path}: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise UserError(f"trace {path} is not UTF-8 text (JSON Lines or CSV)") from None
    if fmt == "mooncake" or (fmt == "auto" and text.lstrip().startswith("{")):
        fmt, rows = "mooncake", _mooncake(path, text)
    else:
        fmt, rows = _csv(path, text, fmt)
    if not rows:
        raise UserError(f"trace {path} holds no requests")
    return fmt, sorted(rows, key=lambda r: r.time_s)


def trace_offsets(rows: list[TraceRow], time_scale: float) -> list[float]:
    """Send offsets: recorded time less the first, times `time_scale`."""
    if not time_scale >= 0:
        raise UserError(f"--time-scale must be 0 or more, got {time_scale}")
    t0 = rows[0].time_s
    return [(r.time_s - t0) * time_scale for r in rows]


def _block(words: list[str], seed: int, hash_id: int, block_tokens: int) -> list[str]:
    return random.Random(f"block:{seed}:{hash_id}").choices(words, k=block_tokens)


def trace_prompts(tok: Tok, rows: list[TraceRow], block_tokens: int = MOONCAKE_BLOCK_TOKENS,
                  seed: int = 0) -> list[Prompt]:
    """One prompt per row, of exactly its input length (at least 1); rows that share leading
    hash ids share those blocks' words, so their prompts share a token prefix."""
    if block_tokens < 1:
        raise UserError(f"--trace-block-tokens must be at least 1, got {block_tokens}")
    words = word_tokens(tok)
    out = []
    for i, row in enumerate(rows):
        n_in, n_out = max(row.input_len, 1), max(row.output_len, 1)
        chosen: list[str] = []
        for h in row.hash_ids:
            if len(chosen) >= n_in:
                break
            chosen += _block(words, seed, h, block_tokens)
        rng = random.Random(f"row:{seed}:{i}")
        chosen = chosen[:n_in] + rng.choices(words, k=max(0, n_in - len(chosen)))
        text = fit_text(tok, chosen, n_in, rng)
        out.append(Prompt(text, tok.count(text), n_out))
    return out


def zero_lengths(rows: list[TraceRow]) -> int:
    """Rows with a recorded input or output length of 0 (sent as 1)."""
    return sum(1 for r in rows if r.input_len == 0 or r.output_len == 0)
