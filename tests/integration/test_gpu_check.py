"""benchmarks/gpu_check.py in its CPU form: every step runs and the tables are written."""
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_check.py"


@pytest.mark.slow
def test_cpu_gpu_check_measures_validates_and_writes_the_tables(tmp_path):
    out = tmp_path / "gpu.md"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", "--out", str(out)],
                          capture_output=True, text=True, timeout=480)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    text = out.read_text()
    for step in ("peak", "ops", "pretrain", "infer", "prefill"):
        assert f"| {step} |" in text and "| ok |" in text
    # the prefill sweep adds two TTFT pairs (one output token: no TPOT)
    assert "| step_time_s | 1 |" in text and "| tpot_s | 2 |" in text and "| ttft_s | 4 |" in text
    assert "## GEMM efficiency by rows" in text and "| 1 |" in text
    assert "## Published set" in text


def test_cuda_without_a_gpu_says_so_in_one_line(tmp_path):
    proc = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path / "x.md")], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2 and "no CUDA device" in proc.stderr and "Traceback" not in proc.stderr
