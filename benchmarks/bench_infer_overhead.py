"""Harness overhead of `llmdissect bench infer`: its decode tokens/s against a bare,
hand-timed `model.generate` loop of the same model, interleaved in one run.

The bare loop runs in this process with the child's thread count: decode time =
generate(out tokens) - generate(1 token) (prefill only), timed with perf_counter, no
streamer, no child, no store. `bench infer` runs as a user runs it (CLI, child process,
per-token streamer). Each round runs both, alternating which goes first; the ratio of a
round is bench infer's median decode tokens/s / the bare loop's, and the headline is the
median of the rounds' ratios (paired, so drift of a shared machine cancels). Target >= 0.97.
Usage:

    python benchmarks/bench_infer_overhead.py [--model tiny-llama] [--rounds 3]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def bench_infer(args: argparse.Namespace, db: str) -> float:
    cmd = [sys.executable, "-m", "llmdissect", "bench", "infer", "--model", args.model, "--batch", str(args.batch),
           "--input-len", str(args.input_len), "--output-len", str(args.output_len), "--warmup", "1",
           "--repeats", str(args.repeats), "--json", "--db", db]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"bench infer failed ({proc.returncode}): {proc.stderr[-1000:]}")
    return json.loads(proc.stdout)["metrics"]["decode_tokens_per_s"]["median"]


class BareLoop:
    """The same model, prompt and generate settings, timed by hand in this process."""

    def __init__(self, args: argparse.Namespace):
        threads = args.threads or len(os.sched_getaffinity(0))
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):  # as the launcher sets them for its child
            os.environ[var] = str(threads)
        import torch

        from llmdissect.modeling import build_model
        from llmdissect.specs import get_model

        torch.set_num_threads(threads)
        spec = get_model(args.model)
        self.torch, self.args = torch, args
        self.model = build_model(spec, dtype="fp32", attn="sdpa", seed=0).eval()
        gen = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, spec.vocab_size, (args.batch, args.input_len), generator=gen)
        self.model.generation_config.disable_compile = True
        self._time(args.output_len)  # warm-up

    def _time(self, n: int) -> float:
        with self.torch.inference_mode():
            t0 = time.perf_counter()
            self.model.generate(self.ids, attention_mask=self.torch.ones_like(self.ids), max_new_tokens=n,
                                min_new_tokens=n, do_sample=False, pad_token_id=0)
            return time.perf_counter() - t0

    def decode_tokens_per_s(self) -> float:
        full = statistics.median(self._time(self.args.output_len) for _ in range(self.args.repeats))
        prefill = statistics.median(self._time(1) for _ in range(self.args.repeats))
        return self.args.batch * (self.args.output_len - 1) / (full - prefill)


def main() -> None:
    from llmdissect.measure.allocator import allocator_env

    extra = allocator_env()
    if extra:  # the bare loop runs here: give this process the allocator bench children get
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **extra})
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="tiny-llama")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--input-len", type=int, default=64)
    p.add_argument("--output-len", type=int, default=32)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=0, help="0: the child's default (usable cores)")
    args = p.parse_args()
    bare = BareLoop(args)
    tool, hand = [], []
    with tempfile.TemporaryDirectory() as tmp:
        db = os.path.join(tmp, "results.db")
        for r in range(args.rounds):
            order = ("tool", "bare") if r % 2 == 0 else ("bare", "tool")  # interleaved, alternating first
            for who in order:
                if who == "tool":
                    tool.append(bench_infer(args, db))
                else:
                    hand.append(bare.decode_tokens_per_s())
            print(f"round {r + 1}: bench infer {tool[-1]:.1f} tok/s, bare generate loop {hand[-1]:.1f} tok/s, "
                  f"ratio {tool[-1] / hand[-1]:.3f}", flush=True)
    ratio = statistics.median(t / h for t, h in zip(tool, hand))
    print(f"{args.model} batch {args.batch}, input {args.input_len}, output {args.output_len}, fp32, "
          f"threads {args.threads or 'default'}, {args.rounds} rounds x {args.repeats} repeats")
    print(f"decode tokens/s: bench infer median {statistics.median(tool):.1f}, bare loop median "
          f"{statistics.median(hand):.1f}; ratio of medians {statistics.median(tool) / statistics.median(hand):.3f}")
    print(f"overhead ratio (median of paired rounds): {ratio:.3f} (target >= 0.97: "
          f"{'met' if ratio >= 0.97 else 'NOT met'})")


if __name__ == "__main__":
    main()
