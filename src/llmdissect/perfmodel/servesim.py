"""A serving engine, simulated one iteration at a time (no torch, no numpy).

Requests arrive at their times; each iteration the scheduler (serveprofiles.SchedulerProfile)
forms a batch under a token budget, a cap on running sequences and the paged KV cache:

- decode-first (vLLM V1, transformers' FIFO scheduler): every running sequence gets its next
  token, or the next chunk of a prompt it is still prefilling; then waiting requests are
  admitted in arrival order, their prompts chunked to what is left of the budget;
- prefill-first (SGLang): while prompts wait, an iteration runs only prefills; decodes run
  when none is waiting or none could be admitted.

Blocks: a sequence holds ceil(tokens with KV / block_size) blocks. When a sequence needs a
block and none is free, cached prefixes no one uses are evicted first (least recently used),
then the most recently admitted running sequence is preempted: its blocks are freed, it goes
back to the head of the queue and later recomputes its prompt and the tokens it had made
(vLLM's recompute preemption). With prefix caching, the full blocks of a request's shared
prefix (`prefix_id`, `prefix_len`) are computed once, then reused by later requests while
cached (a hit skips those tokens' prefill; at least one token is always computed).

An iteration takes `step_time(tokens, decode_ctx, prefill_attn, prefill_kv, logits, seqs)`
seconds (servestep): the tokens it runs, the context the decoding sequences attend to,
sum n (c + n/2) over the prompt chunks of n tokens after c, sum (c + n) (the keys and values
those chunks read), the sequences that produce a token, and the sequences in the batch. A sequence's
token appears at the end of the iteration that made it: a prompt's first token when its last
chunk ran, then one per decode iteration.
"""
from __future__ import annotations

from array import array
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from llmdissect.errors import UserError
from llmdissect.perfmodel.serveprofiles import SchedulerProfile

StepTime = Callable[[int, int, float, int, int, int], float]


@dataclass(frozen=True)
class SimRequest:
    arrival_s: float
    input_len: int
    output_len: int
    prefix_id: int = -1
    """Requests with the same id share their first `prefix_len` prompt tokens (-1: none)."""
    prefix_len: int = 0


class _Seq:
    __slots__ = ("i", "req", "prompt", "computed", "made", "blocks", "cached", "times", "on")

    def __init__(self, i: int, req: SimRequest) -> None:
        self.i, self.req = i, req
        self.prompt = req.input_len  # tokens to prefill: the prompt, plus what it made if preempted
        self.computed = 0  # tokens whose KV exists
        self.made = 0  # output tokens so far
        self.blocks = 0  # blocks this sequence holds alone
        self.cached = 0  # prompt tokens served by a cached prefix (its blocks are the prefix's)
        self.times = array("d")
        self.on = False  # running


@dataclass
class SimResult:
    """Per request: when its tokens appeared (seconds from the start); and the run's totals."""

    requests: list[SimRequest]
    token_times: list[array]
    send_s: list[float] = field(default_factory=list)
    """When each request was sent: its arrival, or later under a concurrency cap."""
    iterations: int = 0
    preemptions: int = 0
    prefix_hit_tokens: int = 0
    num_blocks: int = 0
    kv_use_mean: float = 0.0
    kv_use_max: float = 0.0
    busy_s: float = 0.0
    """Time with a batch running (the rest the engine waited for arrivals)."""
    batch_sizes: list[int] = field(default_factory=list)

    @property
    def end_s(self) -> float:
        return max((t[-1] for t in self.token_times if len(t)), default=0.0)


class _Prefixes:
    """Cached shared prefixes: id -> [blocks, users, last use]; unused ones are evictable."""

    def __init__(self) -> None:
        self.entries: dict[int, list] = {}

    def evictable_blocks(self) -> int:
        return sum(e[0] for e in self.entries.values() if e[1] == 0)

    def evict_one(self) -> int:
        unused = [(e[2], pid) for pid, e in self.entries.items() if e[1] == 0]
        if not unused:
            return 0
        _, pid = min(unused)
        return self.entries.pop(pid)[0]


class _Engine:
    """The scheduler's state between iterations."""

    def __init__(self, requests: list[SimRequest], profile: SchedulerProfile, num_blocks: int) -> None:
        self.P, self.bs, self.num_blocks = profile, profile.block_size, num_blocks
        self.free = num_blocks
        self.seqs = [_Seq(i, r) for i, r in enumerate(requests)]
        self.waiting: deque[_Seq] = deque()
        self.running: list[_Seq] = []
        self.prefixes = _Prefixes()
        self.preemptions = self.hits = 0
        self.max_seqs = profile.max_num_seqs or len(requests) or 1
        self.t = 0.0
        self._mark = 0  # preemptions before this iteration's scheduling

    def blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.bs)

    def free_up(self, need: int, keep: _Seq | None) -> bool:
        """Make `need` blocks free: evict unused prefixes, then preempt the newest runners."""
        while self.free < need:
            got = self.prefixes.evict_one()
            if got:
                self.free += got
                continue
            victim = next((s for s in reversed(self.running) if s is not keep), None)
            if victim is None:
                return False
            self.preempt(victim)
        return True

    def preempt(self, s: _Seq) -> None:
        self.running.remove(s)
        s.on = False
        self.free += s.blocks
        self.release_prefix(s)
        s.blocks, s.computed, s.cached = 0, 0, 0
        s.prompt = s.req.input_len + s.made
        self.waiting.appendleft(s)
        self.preemptions += 1

    def release_prefix(self, s: _Seq) -> None:
        if s.cached and s.req.prefix_id in self.prefixes.entries:
            self.prefixes.entries[s.req.prefix_id][1] -= 1

    def finish(self, s: _Seq) -> None:
        self.running.remove(s)
        s.on = False
        self.free += s.blocks
        self.release_prefix(s)
        s.blocks = 0

    def cache_prefix(self, s: _Seq) -> None:
        """Once a prefix's full blocks have KV, they become the cache's (held by this user)."""
        r, bs = s.req, self.bs
        full = (r.prefix_len // bs) * bs
        if (not self.P.prefix_caching or r.prefix_id < 0 or s.cached or full == 0 or s.computed < full
                or r.prefix_id in self.prefixes.entries):
            return
        n = full // bs
        self.prefixes.entries[r.prefix_id] = [n, 1, self.t]
        s.blocks -= n
        s.cached = full

    def grow(self, s: _Seq, n: int) -> bool:
        """Blocks for `n` more tokens of running `s`; False when `s` itself had to go."""
        need = self.blocks_for(s.computed + n) - self.blocks_for(s.cached) - s.blocks
        if need > 0 and not self.free_up(need, s):
            self.preempt(s)
            return False
        if need > 0:
            s.blocks += need
            self.free -= need
        return True

    def run_running(self, budget: int, decodes: bool, prefills: bool) -> tuple[list, int]:
        batch = []
        for s in list(self.running):
            if not s.on or budget <= 0:
                continue
            left = s.prompt - s.computed
            if left > 0:
                if not prefills:
                    continue
                n = min(left, budget) if self.P.chunked_prefill else (left if left <= budget else 0)
            else:
                if not decodes:
                    continue
                n = 1
            # blocks are claimed only past what the sequence holds (its own and its cached prefix's)
            if n > 0 and (s.computed + n <= s.blocks * self.bs + s.cached or self.grow(s, n)):
                batch.append((s, n))
                budget -= n
        return batch, budget

    def admit(self, budget: int, batch: list) -> tuple[list, int]:
        """Waiting requests in order while the budget, the sequence cap and the blocks allow."""
        P, bs = self.P, self.bs
        while self.waiting and budget > 0 and len(self.running) < self.max_seqs:
            if P.safety_margin and batch and \
                    self.free + self.prefixes.evictable_blocks() < P.safety_margin * self.num_blocks:
                break
            s = self.waiting[0]
            r = s.req
            entry = self.prefixes.entries.get(r.prefix_id) if P.prefix_caching and r.prefix_id >= 0 else None
            hit = 0
            if entry is not None:
                hit = min(entry[0] * bs, s.prompt - 1)
                hit -= hit % bs
            n = min(s.prompt - hit, budget) if P.chunked_prefill else s.prompt - hit
            if n > budget:
                break
            need = self.blocks_for(hit + n) - self.blocks_for(hit)
            pinned = entry[0] if entry is not None and entry[1] == 0 and hit else 0  # the entry it will use
            if need > self.free + self.prefixes.evictable_blocks() - pinned:
                break
            if hit:
                entry[1] += 1
                entry[2] = self.t
            self.free_up(need, None)
            self.waiting.popleft()
            s.computed = s.cached = hit
            self.hits += hit
            s.blocks = need
            self.free -= need
            s.on = True
            self.running.append(s)
            batch.append((s, n))
            budget -= n
        return batch, budget

    def schedule(self) -> list:
        """This iteration's batch: (sequence, tokens) pairs."""
        self._mark = self.preemptions
        budget = self.P.max_batched_tokens
        if self.P.prefill_first:  # a prefill batch when there is prefill work, else decodes
            batch, budget = self.run_running(budget, decodes=False, prefills=True)
            batch, budget = self.admit(budget, batch)
            if batch:
                return batch
            return self.run_running(self.P.max_batched_tokens, decodes=True, prefills=False)[0]
        batch, budget = self.run_running(budget, decodes=True, prefills=True)
        if self.preemptions == self._mark:  # no new prompt while running ones are being pushed out
            batch, budget = self.admit(budget, batch)
        return batch


def simulate(requests: list[SimRequest], profile: SchedulerProfile, num_blocks: int,
             step_time: StepTime, max_concurrency: int = 0) -> SimResult:
    """Run every request to its last token; `num_blocks` KV blocks of `profile.block_size`.
    `max_concurrency` > 0: a closed loop, as `bench serve --max-concurrency` sends: a request
    goes at its arrival or when one of the requests in flight finishes, whichever is later."""
    bs = profile.block_size
    for r in requests:
        if r.input_len < 1 or r.output_len < 1:
            raise UserError("every request needs at least one prompt and one output token")
        need = -(-(r.input_len + r.output_len) // bs)
        if need > num_blocks:
            raise UserError(f"a request of {r.input_len} + {r.output_len} tokens needs {need} KV blocks of {bs} "
                            f"tokens; the cache holds {num_blocks}")
    eng = _Engine(requests, profile, num_blocks)
    pending = deque(sorted(range(len(requests)), key=lambda i: requests[i].arrival_s))
    out = SimResult(requests=requests, token_times=[s.times for s in eng.seqs], num_blocks=num_blocks,
                    send_s=[r.arrival_s for r in requests])
    done, use_sum = 0, 0.0
    # a closed loop's free slots, by the time each came free (a request goes at its arrival or
    # when a slot does); without a cap every request has its own from the start
    slots: deque[float] = deque([0.0] * (max_concurrency or len(requests)))
    while done < len(requests):
        while pending and slots and max(requests[pending[0]].arrival_s, slots[0]) <= eng.t:
            i = pending.popleft()
            out.send_s[i] = max(requests[i].arrival_s, slots.popleft())
            eng.waiting.append(eng.seqs[i])
        if not eng.running and not eng.waiting:
            eng.t = max(eng.t, requests[pending[0]].arrival_s, slots[0])
            continue
        batch = eng.schedule()
        if not batch:
            if pending:
                eng.t = max(eng.t, requests[pending[0]].arrival_s)
                continue
            raise UserError("the simulated engine can schedule nothing: its KV cache is too small for the load")
        tokens = decode_ctx = logits = prefill_kv = 0
        prefill_attn = 0.0
        for s, n in batch:
            tokens += n
            if s.computed >= s.prompt:
                decode_ctx += s.computed
                logits += 1
            else:
                prefill_attn += n * (s.computed + n / 2)
                prefill_kv += s.computed + n
                logits += s.computed + n >= s.prompt
        dt = step_time(tokens, decode_ctx, prefill_attn, prefill_kv, logits, len(batch))
        eng.t += dt
        out.busy_s += dt
        out.iterations += 1
        out.batch_sizes.append(len(batch))
        use = 1 - eng.free / num_blocks
        use_sum += use
        out.kv_use_max = max(out.kv_use_max, use)
        for s, n in batch:
            if not s.on:  # preempted later in the same scheduling pass: its work is lost
                continue
            decoding = s.computed >= s.prompt
            s.computed += n
            eng.cache_prefix(s)
            if decoding or s.computed >= s.prompt:
                s.made += 1
                s.times.append(eng.t)
                if s.made >= s.req.output_len:
                    eng.finish(s)
                    slots.append(eng.t)
                    done += 1
    out.preemptions, out.prefix_hit_tokens = eng.preemptions, eng.hits
    out.kv_use_mean = use_sum / out.iterations if out.iterations else 0.0
    return out
