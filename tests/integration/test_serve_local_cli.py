"""`llmdissect serve-local` as a user runs it: prints the URL, serves, and `kill` stops the server too."""
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

import pytest

from llmdissect.workloads.serve.local_server import free_port

pytestmark = pytest.mark.slow


def _listening(port: int) -> bool:
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
        return True
    except OSError:
        return False


def test_serve_local_serves_and_stops_on_sigterm(tmp_path):
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "llmdissect", "serve-local", "--model", "debug-llama",
                             "--engine", "transformers", "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env={**os.environ, "LLMDISSECT_HOME": str(tmp_path / "state")})
    try:
        lines = []
        while not (lines and lines[-1].startswith("serving")) and len(lines) < 20:
            lines.append(proc.stdout.readline())  # until the server answers /health (or the command ends)
            if not lines[-1]:
                break
        assert lines[-1].startswith(f"serving debug-llama at http://127.0.0.1:{port}"), lines
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=10) as r:
            assert json.load(r)["data"][0]["id"].endswith("debug-llama-seed0")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) != 0
        deadline = time.monotonic() + 15
        while _listening(port) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _listening(port)  # the transformers serve process went with it
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
