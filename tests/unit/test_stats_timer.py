import random
import time

import numpy as np
import pytest

from llmdissect.measure import LoopPolicy, Stats, Timer, measure_loop


def test_stats_match_numpy():
    rng = random.Random(0)
    xs = [rng.expovariate(1.0) for _ in range(101)]
    s = Stats.of(xs)
    assert s.n == 101 and s.median == pytest.approx(np.median(xs))
    for q in (5, 90, 95, 99):
        assert getattr(s, f"p{q}") == pytest.approx(np.percentile(xs, q))
    assert s.stdev == pytest.approx(np.std(xs, ddof=1))
    assert s.min == min(xs) and s.max == max(xs) and s.samples == xs


def test_stats_single_and_empty():
    assert Stats.of([2.0]).stdev == 0.0
    with pytest.raises(ValueError):
        Stats.of([])


def test_stats_roundtrip():
    s = Stats.of([1.0, 2.0, 3.0])
    assert Stats.from_dict(s.to_dict()) == s


def test_loop_policy_counts_and_warmup_apart():
    calls = []
    result = measure_loop(lambda: calls.append(1), LoopPolicy(warmup=3, min_iters=7))
    assert len(result.warmup_samples) == 3 and len(result.samples) == 7 and len(calls) == 10
    assert result.first_call_s == result.warmup_samples[0]


def test_loop_policy_min_time():
    result = measure_loop(lambda: time.sleep(0.01), LoopPolicy(warmup=0, min_iters=1, min_time_s=0.1))
    assert len(result.samples) >= 5
    assert all(s >= 0.009 for s in result.samples)


def test_timer_measures_sleep():
    t = Timer()
    a = t.now()
    time.sleep(0.02)
    assert 0.015 < t.elapsed_s(a, t.now()) < 0.5


def test_invalid_policy():
    with pytest.raises(ValueError):
        LoopPolicy(min_iters=0)
