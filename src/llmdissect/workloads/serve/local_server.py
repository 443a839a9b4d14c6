"""A real OpenAI-compatible server on this machine: `transformers serve` or vLLM on a model
folder written from a spec (random weights) with a BPE tokenizer trained locally in about a
second.

Nothing is downloaded: the folder is complete, and the server runs with HF_HUB_OFFLINE=1.
Its threads are pinned (OMP_NUM_THREADS): on a small machine shared with the load generator
the default thread count let one busy core stretch a decode step from 27 ms to 334 ms.
"""
from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llmdissect.errors import UserError
from llmdissect.measure.allocator import allocator_env
from llmdissect.paths import state_dir

CHAT_TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}<|assistant|>{% endif %}")
BLOCK_TOKENS = 32
CACHE_TOKENS = 16384
"""The continuous-batching KV cache serve-local sizes (blocks of BLOCK_TOKENS)."""
MAX_BATCH_TOKENS = 512
"""Tokens per continuous-batching step serve-local allows."""
SPECIAL_TOKENS = ["<unk>", "<s>", "</s>"]
_LETTERS = "abcdefghijklmnopqrstuvwxyz"


def _corpus(seed: int, n_lines: int = 4000) -> list[str]:
    """Made-up text with a Zipf-like word distribution, enough for a few thousand merges."""
    rng = random.Random(seed)
    words = ["".join(rng.choice(_LETTERS) for _ in range(rng.randint(2, 9))) for _ in range(12000)]
    weights = [1.0 / (i + 1) ** 0.8 for i in range(len(words))]
    return [" ".join(rng.choices(words, weights, k=24)) + "." for _ in range(n_lines)]


def write_tokenizer(folder: Path, vocab_size: int, seed: int = 0) -> None:
    """Train a byte-level BPE of at most `vocab_size` tokens and save it as a transformers
    tokenizer (with a chat template, so /v1/chat/completions works too)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(_corpus(seed), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                   pad_token="</s>", chat_template=CHAT_TEMPLATE)
    fast.save_pretrained(folder)


def prepare_model_folder(model: str, folder: Path | None = None, seed: int = 0) -> Path:
    """A servable folder for spec `model` (cached: written once per spec and seed)."""
    from llmdissect.specs import get_model

    spec = get_model(model)
    folder = Path(folder) if folder else state_dir() / "serve-models" / f"{spec.name}-seed{seed}"
    if (folder / "tokenizer.json").exists() and (folder / "config.json").exists():
        return folder
    from llmdissect.modeling import write_model_folder

    tmp = folder.with_name(folder.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    write_model_folder(spec, tmp, seed=seed)
    write_tokenizer(tmp, spec.vocab_size, seed=seed)
    gen = tmp / "generation_config.json"  # eos/bos ids of our tokenizer, so the server stops where it should
    cfg = json.loads(gen.read_text()) if gen.exists() else {}
    cfg.update({"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 2, "do_sample": False})
    gen.write_text(json.dumps(cfg, indent=2))
    if folder.exists():
        shutil.rmtree(folder)
    tmp.rename(folder)
    return folder


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class LocalServer:
    """A running `transformers serve` process; use as a context manager to stop it surely."""

    process: subprocess.Popen
    base_url: str
    model_name: str
    folder: Path
    log_path: Path
    threads: int
    cmd: list[str] = field(default_factory=list)
    engine: str = "transformers"
    settings: dict = field(default_factory=dict)
    """What the engine was started with (vLLM: its version and scheduler settings)."""

    def stop(self, timeout_s: float = 10.0) -> None:
        if self.process.poll() is not None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(timeout=timeout_s)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.process.wait(timeout=timeout_s)

    def kill(self) -> None:
        """Kill at once (as a crash would)."""
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait(timeout=10)

    def __enter__(self) -> LocalServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _cli() -> list[str]:
    exe = Path(sys.executable).with_name("transformers")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "transformers.cli.transformers"]


def why_it_exited(log: str) -> str:
    """The line of a server's log that says why it stopped: the last error or exception that
    is not a warning (pydantic's "Value error, ..." before its link to the docs), else the
    last line."""
    lines = [line.strip() for line in log.strip().splitlines() if line.strip()]
    for line in reversed(lines):
        if "WARNING" in line or line.startswith("For further information"):
            continue
        if "rror" in line or "Exception" in line:
            return line[:300]
    return lines[-1][:300] if lines else "(no output)"


ENGINES = ("transformers", "vllm")
ENGINE_NAMES = {"transformers": "transformers serve", "vllm": "vLLM"}


def start_server(model: str = "tiny-llama", *, port: int | None = None, threads: int = 1,
                 seed: int = 0, continuous_batching: bool = True, folder: Path | None = None,
                 ready_timeout_s: float | None = None, log_path: Path | None = None,
                 cache_tokens: int = CACHE_TOKENS, max_batch_tokens: int = MAX_BATCH_TOKENS,
                 engine: str = "transformers", vllm_settings: Any = None) -> LocalServer:
    """Write the folder, start the engine's server on 127.0.0.1 and wait until /health answers.

    transformers serve: the continuous-batching KV cache is sized explicitly (`cache_tokens` in
    blocks of 32, at most `max_batch_tokens` per step): left alone on a CPU, transformers sizes
    it from the free RAM (gigabytes) and the first request waited 40 s for the allocation.
    vLLM (workloads/serve/vllm_engine.py): from its own environment, with `vllm_settings`;
    it takes about 95 s to start on 2 CPU cores."""
    if engine not in ENGINES:
        raise UserError(f"unknown --engine {engine!r}; choose one of {', '.join(ENGINES)}")
    settings: dict[str, Any] = {}
    if engine == "vllm":
        from llmdissect.workloads.serve import vllm_engine as ve

        python = ve.require_vllm()
        vllm_settings = vllm_settings or ve.VllmSettings()
        settings = {"version": ve.vllm_version(python), **vllm_settings.to_dict()}
    else:
        import importlib.util

        for mod in ("fastapi", "uvicorn", "openai"):
            if importlib.util.find_spec(mod) is None:
                raise UserError(f"`transformers serve` needs the {mod} package: pip install 'transformers[serving]'")
    folder = prepare_model_folder(model, folder, seed=seed)
    port = port or free_port()
    log_path = log_path or state_dir() / "serve-local" / f"server-{port}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    if engine == "vllm":
        cmd = ve.vllm_command(python, folder, port, vllm_settings, seed)
        env = {**os.environ, **allocator_env(), **ve.vllm_env(vllm_settings, threads)}
        ready_timeout_s = ready_timeout_s or 600.0
    else:
        cmd = [*_cli(), "serve", str(folder), "--host", "127.0.0.1", "--port", str(port), "--device", "cpu",
               "--log-level", "warning", "--default-seed", str(seed)]
        if continuous_batching:
            cmd += ["--continuous-batching", "--cb-block-size", str(BLOCK_TOKENS), "--cb-num-blocks",
                    str(max(1, cache_tokens // BLOCK_TOKENS)), "--cb-max-batch-tokens", str(max_batch_tokens)]
        else:
            cmd.append("--no-continuous-batching")
        settings = {"continuous_batching": continuous_batching, "block_size": BLOCK_TOKENS,
                    "num_blocks": max(1, cache_tokens // BLOCK_TOKENS), "max_batch_tokens": max_batch_tokens}
        env = {**os.environ, **allocator_env(), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
               "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
               "TOKENIZERS_PARALLELISM": "false", "NO_COLOR": "1"}
        ready_timeout_s = ready_timeout_s or 120.0
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, start_new_session=True)
    server = LocalServer(proc, f"http://127.0.0.1:{port}", str(folder), folder, log_path, threads, cmd,
                         engine=engine, settings=settings)
    name = ENGINE_NAMES[engine]
    deadline = time.monotonic() + ready_timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            why = why_it_exited(log_path.read_text(errors="replace"))
            raise UserError(f"{name} exited with code {proc.returncode}: {why} (log: {log_path})")
        try:
            with urllib.request.urlopen(server.base_url + "/health", timeout=2) as r:
                if r.status == 200:
                    return server
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.25)
    server.stop()
    raise UserError(f"{name} did not answer on {server.base_url} within {ready_timeout_s:.0f} s "
                    f"(log: {log_path})")
