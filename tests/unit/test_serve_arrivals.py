"""Arrival schedules: Poisson gaps realise the rate (Kolmogorov-Smirnov), gamma keeps the mean."""
import json
import math

import pytest
from scipy import stats

from llmdissect.errors import UserError
from llmdissect.workloads.serve.arrivals import gamma_offsets, load_offsets, parse_rates, realised_rate


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_poisson_gaps_are_exponential_at_the_rate(seed):
    rate = 2.0
    offsets = gamma_offsets(201, rate, 1.0, seed)
    gaps = [b - a for a, b in zip(offsets, offsets[1:])]
    assert len(gaps) == 200
    # KS test against exponential(mean 1/rate): must not reject at 1 %
    assert stats.kstest(gaps, "expon", args=(0, 1 / rate)).pvalue > 0.01
    assert abs(realised_rate(offsets) - rate) / rate < 0.10


def test_ks_rejects_a_wrong_rate():
    offsets = gamma_offsets(201, 4.0, 1.0, 0)
    gaps = [b - a for a, b in zip(offsets, offsets[1:])]
    assert stats.kstest(gaps, "expon", args=(0, 1 / 2.0)).pvalue < 0.01


def test_gamma_burstiness_keeps_the_mean_and_changes_the_spread():
    smooth = gamma_offsets(2001, 5.0, 4.0, 0)
    bursty = gamma_offsets(2001, 5.0, 0.25, 0)
    for off in (smooth, bursty):
        assert abs(realised_rate(off) - 5.0) / 5.0 < 0.15
    cv = lambda off: stats.variation([b - a for a, b in zip(off, off[1:])])  # noqa: E731
    assert cv(smooth) < 0.7 < 1.4 < cv(bursty)


def test_seed_repeats_and_inf_sends_at_once():
    assert gamma_offsets(10, 3.0, 1.0, 7) == gamma_offsets(10, 3.0, 1.0, 7)
    assert gamma_offsets(10, 3.0, 1.0, 7) != gamma_offsets(10, 3.0, 1.0, 8)
    assert gamma_offsets(5, math.inf) == [0.0] * 5
    with pytest.raises(UserError):
        gamma_offsets(5, -1.0)


def test_load_offsets_from_list_and_record(tmp_path):
    f = tmp_path / "a.json"
    f.write_text(json.dumps([0.5, 0.2, 1.0]))
    assert load_offsets(f) == pytest.approx([0.0, 0.3, 0.8])
    f.write_text(json.dumps({"id": "x", "metrics": {"send_offsets_s": [0.0, 0.1]}}))
    assert load_offsets(f) == [0.0, 0.1]
    f.write_text("not json")
    with pytest.raises(UserError, match="not JSON"):
        load_offsets(f)
    with pytest.raises(UserError, match="not found"):
        load_offsets(tmp_path / "missing.json")


def test_parse_rates():
    assert parse_rates("1, 2.5,inf") == [1.0, 2.5, math.inf]
    for bad in ("", "x", "0", "-2"):
        with pytest.raises(UserError):
            parse_rates(bad)
