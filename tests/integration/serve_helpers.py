"""A real `transformers serve` process on 127.0.0.1 for the serving tests (debug-llama)."""
from __future__ import annotations

import tempfile
from pathlib import Path

from llmdissect.workloads.serve.local_server import LocalServer, start_server

MODEL_CACHE = Path(tempfile.gettempdir()) / "llmdissect-test-serve-models"


def start_debug_server(log_dir: Path) -> LocalServer:
    """debug-llama with one server thread; the model folder is cached between test runs."""
    return start_server("debug-llama", threads=1, folder=MODEL_CACHE / "debug-llama-seed0",
                        log_path=log_dir / "server.log", ready_timeout_s=180)


def start_tiny_server(log_dir: Path) -> LocalServer:
    """tiny-llama (16 M parameters) with one server thread: slow enough on a CPU that a short
    capacity search finds where its latency targets break."""
    return start_server("tiny-llama", threads=1, folder=MODEL_CACHE / "tiny-llama-seed0",
                        log_path=log_dir / "server.log", ready_timeout_s=180)
