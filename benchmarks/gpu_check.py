"""The check to run once on a lent CUDA machine: measure, then hold the estimate against it.

Runs, each as the CLI would, into a fresh state folder and store: `peak` (stores the device's
ceilings in that folder's calibration profile), `bench ops` on one decoder layer, `bench pretrain`
and `bench infer` on a Llama-shaped model of about 1.1 B parameters (TinyLlama-1.1B's shapes,
random weights), a prefill sweep (`bench infer` of one output token after 128 and 2048 prompt
tokens: the published set's short-prompt TTFT points are predicted 0.5-0.65x, and this says
whether a GEMM of 128 rows reaches its roofline on the device), `bench comm` where the machine
has two GPUs or more, then `validate` of those records against the estimate for the detected
device, and `validate --published`. Writes the tables to docs/gpu.md (or --out), with the GEMM
efficiency `peak` measured by rows for the largest product of its grid. Budget: under 8
minutes on one H100-class GPU.

    python benchmarks/gpu_check.py                 # CUDA: the 1.1 B model, bf16
    python benchmarks/gpu_check.py --device cpu    # anywhere: debug-llama, fp32 (what the tests run)
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
MODEL_1B = HERE / "models" / "llama-1.1b.toml"


def _steps(device: str, nproc_gpus: int) -> list[tuple[str, list[str]]]:
    if device == "cpu":
        model, dtype = "debug-llama", "fp32"
        train = ["--seq", "64", "--micro-batch", "2", "--steps", "3", "--warmup", "1"]
        infer = ["--batch", "1,4", "--input-len", "32", "--output-len", "8", "--repeats", "2"]
        prefill = ["--batch", "1", "--input-len", "16,64", "--output-len", "1", "--repeats", "2"]
        peak = ["peak", "--quick", "--device", "cpu"]
    else:
        model, dtype = str(MODEL_1B), "bf16"
        train = ["--seq", "2048", "--micro-batch", "4", "--steps", "10", "--warmup", "3", "--attn", "sdpa"]
        infer = ["--batch", "1,16", "--input-len", "512", "--output-len", "128", "--repeats", "3"]
        prefill = ["--batch", "1", "--input-len", "128,2048", "--output-len", "1", "--repeats", "5"]
        peak = ["peak", "--device", "cuda:0"]
    # on a GPU the operators of one layer at a few hundred tokens are launch-bound (their rows
    # are then left out of the efficiencies): time them at a training micro-batch's tokens
    ops_tokens = [] if device == "cpu" else ["--tokens", "8192"]
    steps = [("peak", peak),
             ("ops", ["bench", "ops", "--model", model, "--dtype", dtype, "--device", device, *ops_tokens]),
             ("pretrain", ["bench", "pretrain", "--model", model, "--dtype", dtype, "--device", device, *train]),
             ("infer", ["bench", "infer", "--model", model, "--dtype", dtype, "--device", device, *infer]),
             ("prefill", ["bench", "infer", "--model", model, "--dtype", dtype, "--device", device, *prefill])]
    if nproc_gpus >= 2:
        steps.append(("comm", ["bench", "comm", "--nproc", str(min(nproc_gpus, 8)), "--ops",
                               "all_reduce,all_gather,reduce_scatter", "--max-bytes", "256M"]))
    return steps


def _gpus() -> int:
    try:
        import torch

        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except ImportError:
        return 0


def _cli(args: list[str], env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "llmdissect", *args], env=env, capture_output=True, text=True,
                          timeout=timeout)


def gemm_rows_table(profile: dict) -> list[str]:
    """Markdown rows of the GEMM efficiency `peak` measured by rows, for the largest K and N
    of its grid on each device of `profile` (the calibration profile's JSON)."""
    lines: list[str] = []
    sections = [("cpu", profile.get("cpu") or {})] + list((profile.get("gpus") or {}).items())
    for name, section in sections:
        grid = (section or {}).get("gemm_efficiency_by_shape")
        if not isinstance(grid, dict) or not grid.get("efficiency"):
            continue
        k, n = grid["k"][-1], grid["n"][-1]
        lines += [f"GEMM efficiency on {name} ({grid.get('dtype')}, K = {k:g}, N = {n:g}), by rows M:", "",
                  "| M | efficiency |", "|---|---|"]
        lines += [f"| {m:g} | {plane[-1][-1]:.0%} |" for m, plane in zip(grid["rows"], grid["efficiency"])]
        lines.append("")
    return lines


def _markdown(device: str, timings: list[tuple[str, float, str]], validation: dict, published: dict,
              profile: dict | None = None) -> str:
    lines = [f"# GPU check ({device})", "", f"Written by `benchmarks/gpu_check.py` on {time.strftime('%Y-%m-%d')}.",
             "", "| step | seconds | outcome |", "|---|---|---|"]
    lines += [f"| {name} | {secs:.1f} | {outcome} |" for name, secs, outcome in timings]
    lines += ["", "## Estimate against measurement (`validate`)", "",
              "| metric | pairs | MAPE | median error | worst |", "|---|---|---|---|---|"]
    for s in validation.get("summary", []):
        lines.append(f"| {s['metric']} | {s['pairs']} | {s['mape']:.0%} | {s['median_error']:+.0%} | "
                     f"{s['worst_error']:+.0%} |")
    lines += ["", "## Every pair", "", "| point | metric | measured | predicted | error |", "|---|---|---|---|---|"]
    for p in validation.get("pairs", []):
        lines.append(f"| {p['label']} | {p['metric']} | {p['measured']:.4g} | {p['predicted']:.4g} | "
                     f"{p['error']:+.0%} |")
    grid = gemm_rows_table(profile or {})
    if grid:
        lines += ["", "## GEMM efficiency by rows (`peak`)", "", *grid]
    summary = (published.get("metrics") or {}).get("summary") or {}
    if summary:
        o = summary["overall"]
        lines += ["", "## Published set (`validate --published`)", "",
                  f"{o['points']} exactly expressed points; median |error| "
                  f"{(o['median_abs_error'] or 0):.0%}; within 1.25x {(o['within_1.25x'] or 0):.0%}."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--out", type=Path, default=HERE.parent / "docs" / "gpu.md")
    ap.add_argument("--budget-s", type=float, default=480.0, help="Stop starting new steps past this.")
    ap.add_argument("--workdir", type=Path, default=None,
                    help="Folder for the state, the store and each step's log [a new temporary one].")
    args = ap.parse_args(argv)
    gpus = _gpus()
    if args.device == "cuda" and gpus == 0:
        print("gpu_check: no CUDA device here; run with --device cpu for the CPU version", file=sys.stderr)
        return 2
    folder = args.workdir or Path(tempfile.mkdtemp(prefix="gpu-check-"))
    (folder / "logs").mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "LLMDISSECT_HOME": str(folder / "state"), "LLMDISSECT_DB": str(folder / "results.db")}
    t_start, timings = time.perf_counter(), []
    for name, cmd in _steps(args.device, gpus if args.device == "cuda" else 0):
        left = args.budget_s - (time.perf_counter() - t_start)
        if left < 30:
            timings.append((name, 0.0, "not run: over the time budget"))
            continue
        t0 = time.perf_counter()
        try:
            proc = _cli(cmd, env, timeout=left)
            (folder / "logs" / f"{name}.log").write_text(f"$ llmdissect {' '.join(cmd)}\n{proc.stdout}\n{proc.stderr}")
            outcome = "ok" if proc.returncode == 0 else f"exit {proc.returncode}: " + (
                proc.stderr.strip().splitlines() or ["?"])[-1][:160]
        except subprocess.TimeoutExpired:
            outcome = "timed out"
        timings.append((name, time.perf_counter() - t0, outcome))
        print(f"gpu_check: {name}: {outcome} ({timings[-1][1]:.1f} s)", flush=True)
    val = _cli(["validate", "--json"], env, timeout=120)
    validation = json.loads(val.stdout) if val.returncode == 0 else {}
    pub = _cli(["validate", "--published", "--json"], env, timeout=120)
    published = json.loads(pub.stdout) if pub.returncode == 0 else {}
    cal = folder / "state" / "calibration.json"
    profile = json.loads(cal.read_text()) if cal.exists() else {}
    text = _markdown(args.device if args.device == "cpu" else _device_name(), timings, validation, published,
                     profile)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)
    return 0 if all(t[2] == "ok" for t in timings) and validation else 1


def _device_name() -> str:
    import torch

    return torch.cuda.get_device_name(0)


if __name__ == "__main__":
    sys.exit(main())
