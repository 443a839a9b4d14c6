"""A bare, hand-written PyTorch training loop: the yardstick for harness overhead.

Usage: python bare_train_loop.py MODEL MICRO_BATCH SEQ STEPS WARMUP THREADS
Prints one JSON line: {"tokens_per_s": ..., "step_s": [...]}.
"""
import json
import statistics
import sys
import time

import torch

from llmdissect.modeling import build_model
from llmdissect.specs import get_model

model_name, mb, seq, steps, warmup, threads = sys.argv[1], *map(int, sys.argv[2:])
torch.set_num_threads(threads)
spec = get_model(model_name)
model = build_model(spec, attn="sdpa", seed=0)
model.train()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
ids = torch.randint(0, spec.vocab_size, (mb, seq), generator=torch.Generator().manual_seed(0))
times = []
for i in range(warmup + steps):
    t0 = time.perf_counter()
    loss = model(input_ids=ids, labels=ids, use_cache=False).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    if i >= warmup:
        times.append(time.perf_counter() - t0)
print(json.dumps({"tokens_per_s": mb * seq / statistics.median(times), "step_s": times}))
