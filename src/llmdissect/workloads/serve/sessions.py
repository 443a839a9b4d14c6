"""Multi-turn sessions: each turn sends the whole conversation so far plus a new user message.

Parameters (`bench serve` options): `--turns T` turns per session (T > 1 makes sessions;
`--num-prompts` then counts sessions, so T * num_prompts requests are sent); each new user
message is `--input-len` tokens of synthetic words (or a dataset prompt) and each answer is
asked for `--output-len` tokens; `--think-time-s S` seconds pass between an answer and the
next turn (the user reading and typing). Sessions start by the arrival process
(`--request-rate`, `--burstiness`, or `--arrivals`); the turns of one session go one after
the other. A turn's history is the earlier user messages and the answers the server really
gave: with /v1/chat/completions as user and assistant messages, with /v1/completions as one
text (message, answer, message, ...), so that a server's prefix cache can hit it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from llmdissect.workloads.serve.prompts import Prompt


@dataclass(frozen=True)
class Session:
    start_offset_s: float
    """When the first turn is sent, seconds from the start of the run."""
    turns: list[Prompt]
    """The new user message of each turn (and the output length asked for it)."""


def make_sessions(messages: list[Prompt], turns: int, offsets: list[float]) -> list[Session]:
    """Cut `messages` (turns * sessions of them, in order) into sessions starting at `offsets`."""
    n = min(len(offsets), len(messages) // turns)
    return [Session(offsets[s], messages[s * turns:(s + 1) * turns]) for s in range(n)]


@dataclass
class History:
    """The conversation of one session so far, as each endpoint sends it."""

    messages: list[dict[str, str]] = field(default_factory=list)
    text: str = ""

    def request(self, endpoint: str, turn: Prompt) -> dict[str, Any]:
        """The prompt fields of the next request: the history plus `turn`'s message."""
        if endpoint == "chat":
            system = [{"role": "system", "content": turn.prefix}] if turn.prefix and not self.messages else []
            return {"messages": system + self.messages + [{"role": "user", "content": turn.text}]}
        return {"prompt": (turn.prefix if not self.text else "") + self.text + turn.text}

    def add(self, endpoint: str, turn: Prompt, answer: str) -> None:
        """Append a finished turn: its message and the server's answer."""
        if endpoint == "chat":
            if turn.prefix and not self.messages:
                self.messages.append({"role": "system", "content": turn.prefix})
            self.messages += [{"role": "user", "content": turn.text}, {"role": "assistant", "content": answer}]
        else:
            self.text = (turn.prefix if not self.text else "") + self.text + turn.text + answer
