"""The serving simulation against schedules worked out by hand (perfmodel/servesim.py; no torch)."""
from __future__ import annotations

import random

import pytest

from llmdissect.errors import UserError
from llmdissect.perfmodel.serveprofiles import PROFILES, SchedulerProfile, get_profile
from llmdissect.perfmodel.servesim import SimRequest, simulate


def _profile(**kw) -> SchedulerProfile:
    base = dict(name="t", max_num_seqs=0, max_batched_tokens=100, block_size=1)
    return SchedulerProfile(**{**base, **kw})


class Steps:
    """One second an iteration; remembers what each iteration ran."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def __call__(self, tokens, decode_ctx, prefill_attn, prefill_kv, logits, seqs) -> float:
        self.calls.append((tokens, decode_ctx, prefill_attn, prefill_kv, logits))
        self.seqs = getattr(self, "seqs", []) + [seqs]
        return 1.0


def _times(result) -> list[list[float]]:
    return [list(t) for t in result.token_times]


def test_one_request_prefills_then_decodes_one_token_an_iteration():
    steps = Steps()
    r = simulate([SimRequest(0.0, 10, 3)], _profile(), 1000, steps)
    assert _times(r) == [[1.0, 2.0, 3.0]]
    # the prompt (10 tokens, causal: 10 x 10 / 2 query-key pairs), then two decodes over 10 and 11 positions
    assert steps.calls == [(10, 0, 50.0, 10, 1), (1, 10, 0.0, 0, 1), (1, 11, 0.0, 0, 1)]


def test_chunked_prefill_shares_the_budget_with_decodes():
    # budget 4: A's prompt (3) and one token of B's; then A's decode and B's last 2; then B's decode
    steps = Steps()
    r = simulate([SimRequest(0.0, 3, 2), SimRequest(0.0, 3, 2)], _profile(max_batched_tokens=4), 1000, steps)
    assert _times(r) == [[1.0, 2.0], [2.0, 3.0]]
    assert [c[0] for c in steps.calls] == [4, 3, 1] and steps.seqs == [2, 2, 1]
    assert steps.calls[1][2] == 2 * (1 + 2 / 2)  # B's chunk of 2 after 1 cached position


def test_without_chunking_a_prompt_waits_for_a_whole_budget():
    r = simulate([SimRequest(0.0, 3, 2), SimRequest(0.0, 3, 2)],
                 _profile(max_batched_tokens=4, chunked_prefill=False), 1000, Steps())
    assert _times(r) == [[1.0, 2.0], [2.0, 3.0]]  # B's 3 tokens fit only beside A's 1-token decode


def test_running_sequences_are_capped():
    r = simulate([SimRequest(0.0, 2, 2) for _ in range(3)], _profile(max_num_seqs=2), 1000, Steps())
    assert _times(r) == [[1.0, 2.0], [1.0, 2.0], [3.0, 4.0]]


def test_out_of_blocks_preempts_the_newest_and_recomputes_it():
    # blocks of 2 tokens, 4 blocks: each request needs 3 at its end (2 + 4 - 1 positions), both
    # cannot finish together; at the 4th iteration B is pushed out, A finishes, B recomputes
    # its prompt and its 3 tokens (5 positions) and makes its last token
    steps = Steps()
    r = simulate([SimRequest(0.0, 2, 4), SimRequest(0.0, 2, 4)], _profile(block_size=2), 4, steps)
    assert _times(r) == [[1.0, 2.0, 3.0, 4.0], [1.0, 2.0, 3.0, 5.0]]
    assert r.preemptions == 1
    assert steps.calls[-1][0] == 5  # the recomputed prefill
    assert r.kv_use_max == 1.0


def test_a_request_larger_than_the_cache_is_refused():
    with pytest.raises(UserError, match="needs 6 KV blocks"):
        simulate([SimRequest(0.0, 8, 4)], _profile(block_size=2), 5, Steps())


def test_prefix_cache_hits_skip_the_shared_blocks():
    # blocks of 4; 8 shared tokens (2 full blocks) computed by A, reused by B after A is done
    steps = Steps()
    reqs = [SimRequest(0.0, 10, 2, prefix_id=7, prefix_len=8), SimRequest(5.0, 10, 2, prefix_id=7, prefix_len=8)]
    r = simulate(reqs, _profile(block_size=4, prefix_caching=True), 100, steps)
    assert r.prefix_hit_tokens == 8
    assert steps.calls[2][0] == 2  # B prefills only its 2 own tokens
    assert _times(r)[1] == [6.0, 7.0]
    off = simulate(reqs, _profile(block_size=4), 100, Steps())
    assert off.prefix_hit_tokens == 0


def test_prefill_first_pauses_decodes_for_a_new_prompt():
    steps = Steps()
    reqs = [SimRequest(0.0, 4, 4), SimRequest(1.5, 4, 2)]
    r = simulate(reqs, _profile(prefill_first=True), 1000, steps)
    # A: prompt @1, decode @2; B arrives at 1.5 and its prompt runs alone @3; then both decode @4
    assert _times(r) == [[1.0, 2.0, 4.0, 5.0], [3.0, 4.0]]
    assert steps.calls[2] == (4, 0, 8.0, 4, 1)


def test_a_concurrency_cap_sends_each_request_when_one_finishes():
    reqs = [SimRequest(0.0, 2, 2), SimRequest(0.0, 2, 2)]
    r = simulate(reqs, _profile(), 1000, Steps(), max_concurrency=1)
    assert r.send_s == [0.0, 2.0]
    assert _times(r) == [[1.0, 2.0], [3.0, 4.0]]


def test_a_long_run_conserves_tokens_and_order():
    rng = random.Random(1)
    t, reqs = 0.0, []
    for _ in range(400):
        t += rng.expovariate(3.0)
        reqs.append(SimRequest(t, rng.randint(1, 60), rng.randint(1, 30)))
    steps = Steps()
    r = simulate(reqs, _profile(max_batched_tokens=64, max_num_seqs=16, block_size=8), 10_000, steps)
    assert r.preemptions == 0
    # every prompt token once, every output token but the last fed back once
    assert sum(c[0] for c in steps.calls) == sum(q.input_len + q.output_len - 1 for q in reqs)
    for q, times, sent in zip(reqs, r.token_times, r.send_s):
        assert len(times) == q.output_len and list(times) == sorted(times) and times[0] > sent >= q.arrival_s
    # Little's law over the run (empty at both ends): the time-average of the requests in the
    # system, swept event by event, equals the arrival rate times the mean time in the system
    events = sorted([(sent, 1) for sent in r.send_s] + [(times[-1], -1) for times in r.token_times])
    area, level, last = 0.0, 0, 0.0
    for at, step in events:
        area += level * (at - last)
        level, last = level + step, at
    span = r.end_s
    mean_time = sum(times[-1] - sent for times, sent in zip(r.token_times, r.send_s)) / len(reqs)
    assert area / span == pytest.approx(len(reqs) / span * mean_time)
    assert r.busy_s == r.iterations == len(steps.calls)
    assert max(r.batch_sizes) <= 16 and max(c[0] for c in steps.calls) <= 64


def test_profiles_carry_their_sources_and_overrides_are_checked():
    for p in PROFILES.values():
        assert p.source and p.max_batched_tokens > 0 and p.block_size > 0
    assert get_profile("vllm").with_overrides(max_num_seqs=8, block_size=None).max_num_seqs == 8
    with pytest.raises(UserError, match="unknown scheduler profile"):
        get_profile("tgi")
    with pytest.raises(UserError, match="must be positive"):
        get_profile("vllm").with_overrides(max_batched_tokens=0)
