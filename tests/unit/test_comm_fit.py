"""The alpha-beta fit of collective times."""
import random

import pytest

from llmdissect.micro.comm_alpha_beta import fit_alpha_beta, fit_rows

SIZES = [1024 * 2**k for k in range(15)]


def test_recovers_an_exact_line():
    alpha, beta = 50e-6, 1 / 2e9  # 50 us, 2 GB/s
    fit = fit_alpha_beta(SIZES, [alpha + beta * s for s in SIZES])
    assert fit.alpha_s == pytest.approx(alpha, rel=1e-9)
    assert fit.beta_s_per_byte == pytest.approx(beta, rel=1e-9)
    assert fit.bandwidth_bytes_per_s == pytest.approx(2e9)
    assert fit.fit_error < 1e-9 and fit.fit_max_error < 1e-9
    assert (fit.points, fit.min_size_bytes, fit.max_size_bytes) == (15, 1024, 16 * 2**20)
    assert fit.time_s(1e6) == pytest.approx(alpha + beta * 1e6)


def test_noise_is_reported_as_fit_error_and_latency_is_kept():
    rng = random.Random(0)
    alpha, beta = 100e-6, 1 / 1e9
    times = [(alpha + beta * s) * rng.uniform(0.9, 1.1) for s in SIZES]
    fit = fit_alpha_beta(SIZES, times)
    assert fit.alpha_s == pytest.approx(alpha, rel=0.15)
    assert fit.beta_s_per_byte == pytest.approx(beta, rel=0.15)
    assert 0.01 < fit.fit_error < 0.1 and fit.fit_max_error <= 0.2


def test_alpha_and_beta_never_go_negative():
    # times that fall with size: the unconstrained line has a negative slope
    fit = fit_alpha_beta([1000, 2000, 4000], [3e-3, 2e-3, 1e-3])
    assert fit.alpha_s > 0 and fit.beta_s_per_byte == 0
    # a pure bandwidth line with the smallest point fast: alpha clamps to 0
    fit = fit_alpha_beta([1000, 1e6, 1e7], [0.5e-6, 1e-3, 1e-2])
    assert fit.alpha_s == 0 and fit.beta_s_per_byte > 0


def test_needs_two_sizes_and_positive_times():
    with pytest.raises(ValueError):
        fit_alpha_beta([1024, 1024], [1e-3, 2e-3])
    with pytest.raises(ValueError):
        fit_alpha_beta([1024, 2048], [0.0, 1e-3])


def test_fit_rows_uses_out_of_place_where_both_exist():
    def row(op, placement, size, t):
        return {"op": op, "placement": placement, "size_bytes": size, "time_s": {"median": t}}
    rows = [row("all_gather", "out-of-place", s, 1e-5 + s / 1e9) for s in SIZES]
    rows += [row("all_gather", "in-place", s, 1.0) for s in SIZES]  # would ruin the fit if used
    rows += [row("all_reduce", "in-place", s, 2e-5 + s / 5e8) for s in SIZES]
    rows += [row("broadcast", "in-place", 1024, 1e-5)]  # one size: no fit
    rows += [row("reduce", "in-place", 1024, 0.0), row("reduce", "in-place", 2048, 1e-5)]  # a zero time: no fit
    fits = fit_rows(rows)
    assert set(fits) == {"all_gather", "all_reduce"}
    assert fits["all_gather"].bandwidth_bytes_per_s == pytest.approx(1e9)
    assert fits["all_reduce"].alpha_s == pytest.approx(2e-5)


def test_a_row_k_times_slow_and_one_k_times_fast_cancel_in_logs():
    # the fit is of log time, so it reads the same as a fit of busbw (size over time): two rows
    # of one size, one 3x slow and one 3x fast, leave the line through the others where it was
    alpha, beta = 50e-6, 1 / 2e9
    sizes = SIZES + [SIZES[7]]
    times = [alpha + beta * s for s in SIZES] + [0.0]
    times[7], times[-1] = 3 * times[7], times[7] / 3
    fit = fit_alpha_beta(sizes, times)
    assert fit.alpha_s == pytest.approx(alpha, rel=1e-6)
    assert fit.beta_s_per_byte == pytest.approx(beta, rel=1e-6)
    # the relative-error fit alone (its starting point) is pulled by the slow row
    from llmdissect.micro.comm_alpha_beta import _relative_fit

    start = _relative_fit(list(zip(sizes, times)))
    assert abs(start[0] - alpha) / alpha > 0.01 or abs(start[1] - beta) / beta > 0.01
