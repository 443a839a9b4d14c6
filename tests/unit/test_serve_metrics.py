"""Serving metric definitions (docs/metrics.md, Inference): ITL chunk rule, TPOT, goodput."""
import statistics

import pytest

from llmdissect.errors import UserError
from llmdissect.workloads.serve.metrics import (
    RequestResult,
    chunk_token_counts,
    itl_samples,
    meets_slo,
    parse_slo,
    request_itls,
    summarize,
)


def _req(i, times, tokens, ok=True, texts=None):
    return RequestResult(index=i, ok=ok, ttft_s=times[0] if ok else None, e2e_s=times[-1] if ok else None,
                         chunk_times_s=list(times), chunk_texts=texts or ["x"] * len(times),
                         output_tokens=tokens if ok else None, output_tokens_source="usage",
                         requested_output_len=tokens, input_len=10, error=None if ok else "boom")


def test_chunk_of_k_tokens_gives_k_samples_of_gap_over_k():
    # chunks at 0.1 (1 token), 0.2 (1), 0.5 (3 tokens): gaps 0.1 and 0.3 -> [0.1, 0.1, 0.1, 0.1]
    assert itl_samples([0.1, 0.2, 0.5], [1, 1, 3]) == pytest.approx([0.1, 0.1, 0.1, 0.1])
    # a chunk carrying no token passes its gap on
    assert itl_samples([0.0, 0.1, 0.4], [1, 0, 2]) == pytest.approx([0.2, 0.2])


def test_chunk_token_counts_sum_and_shape():
    assert chunk_token_counts(4, 4) == [1, 1, 1, 1]
    assert sum(chunk_token_counts(4, 10)) == 10
    assert chunk_token_counts(3, 7, [1, 1, 3]) == [1, 2, 4]
    assert chunk_token_counts(5, 3) == [1, 0, 0, 1, 1]  # fewer tokens than chunks: last chunk still counted
    assert chunk_token_counts(1, 5) == [5]


@pytest.mark.parametrize("times,tokens", [([0.05, 0.07, 0.1, 0.16], 4), ([0.05, 0.07, 0.1, 0.16], 9),
                                          ([0.2, 0.21, 0.3, 0.31, 0.5, 0.52], 4)])
def test_mean_itl_of_a_request_equals_its_tpot(times, tokens):
    r = _req(0, times, tokens, texts=["ab", "c", "defg", "h", "ij", "k"][:len(times)])
    itl = request_itls(r)
    assert len(itl) == tokens - 1
    assert statistics.fmean(itl) == pytest.approx(r.tpot_s)
    assert r.tpot_s == pytest.approx((times[-1] - times[0]) / (tokens - 1))


def test_one_token_requests_have_no_tpot():
    r = _req(0, [0.3], 1)
    assert r.tpot_s is None and request_itls(r) == []


def test_goodput_counts_only_requests_meeting_every_slo():
    fast = _req(0, [0.1, 0.12, 0.14], 3)            # ttft 0.1, tpot 0.02
    slow_first = _req(1, [0.9, 0.91, 0.92], 3)      # ttft 0.9
    slow_decode = _req(2, [0.1, 0.3, 0.5], 3)       # tpot 0.2
    failed = _req(3, [0.1], 1, ok=False)
    slo = parse_slo("ttft=0.5,tpot=0.05")
    assert slo == {"ttft_s": 0.5, "tpot_s": 0.05}
    assert [meets_slo(r, slo) for r in (fast, slow_first, slow_decode, failed)] == [True, False, False, False]
    m = summarize([fast, slow_first, slow_decode, failed], duration_s=2.0, slo=slo)
    assert m["goodput_per_s"] == pytest.approx(0.5)  # 1 good request / 2 s
    assert m["request_throughput_per_s"] == pytest.approx(1.5)
    assert (m["completed"], m["failed"], m["errors"]) == (3, 1, ["boom"])
    assert m["output_tokens_per_s"] == pytest.approx(9 / 2.0)
    assert m["total_tokens_per_s"] == pytest.approx((9 + 30) / 2.0)
    assert m["ttft_s"]["n"] == 3 and m["itl_s"]["n"] == 6
    assert summarize([fast], 1.0, {})["completed"] == 1
    assert "goodput_per_s" not in summarize([fast], 1.0, {})


def test_parse_slo_rejects_nonsense():
    for bad in ("ttft", "latency=1", "tpot=fast"):
        with pytest.raises(UserError):
            parse_slo(bad)
    assert parse_slo("e2e_s=2") == {"e2e_latency_s": 2.0}
