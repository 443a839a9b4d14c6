"""Collective definitions: nccl-tests' busbw factors, sizes per operator, size parsing."""
import pytest

from llmdissect.errors import UserError
from llmdissect.micro.collectives import OPS, algbw_bytes_per_s, busbw_bytes_per_s, parse_ops, parse_size, size_sweep


@pytest.mark.parametrize("n, expected", [
    (2, {"all_reduce": 1.0, "all_gather": 0.5, "reduce_scatter": 0.5, "all_to_all": 0.5,
         "broadcast": 1.0, "reduce": 1.0, "send_recv": 1.0}),
    (3, {"all_reduce": 4 / 3, "all_gather": 2 / 3, "reduce_scatter": 2 / 3, "all_to_all": 2 / 3,
         "broadcast": 1.0, "reduce": 1.0, "send_recv": 1.0}),
    (8, {"all_reduce": 1.75, "all_gather": 0.875, "reduce_scatter": 0.875, "all_to_all": 0.875,
         "broadcast": 1.0, "reduce": 1.0, "send_recv": 1.0}),
])
def test_busbw_factors_match_nccl_tests(n, expected):
    assert {name: op.busbw_factor(n) for name, op in OPS.items()} == pytest.approx(expected)


def test_algbw_and_busbw_for_three_ranks():
    # 3 ranks, all_reduce of 3 MB in 1 ms: algbw 3 GB/s, busbw 3 x 4/3 = 4 GB/s
    assert algbw_bytes_per_s(3_000_000, 1e-3) == pytest.approx(3e9)
    assert busbw_bytes_per_s("all_reduce", 3_000_000, 1e-3, 3) == pytest.approx(4e9)
    assert busbw_bytes_per_s("all_gather", 3_000_000, 1e-3, 3) == pytest.approx(2e9)
    assert busbw_bytes_per_s("broadcast", 3_000_000, 1e-3, 3) == pytest.approx(3e9)


def test_counts_round_split_buffers_to_a_multiple_of_ranks():
    assert OPS["all_reduce"].count(1024, 4, 3) == 256
    assert OPS["all_gather"].count(1024, 4, 3) == 255  # 3 chunks of 85: size 1020 B, as nccl-tests
    assert OPS["reduce_scatter"].count(1024, 2, 3) == 510
    assert OPS["all_to_all"].count(4, 4, 3) == 3  # never fewer than one element per rank
    assert OPS["broadcast"].count(1, 4, 2) == 1


@pytest.mark.parametrize("text, size", [("1024", 1024), ("1K", 1024), ("1k", 1024), ("1KB", 1024),
                                        ("4KiB", 4096), ("256M", 256 * 2**20), ("1G", 2**30), ("1.5K", 1536),
                                        (" 8 M ", 8 * 2**20), ("7B", 7)])
def test_parse_size(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "K", "1X", "-1K", "0", "1e3", "12 parsecs", "100G"])
def test_parse_size_rejects_bad_text(text):
    with pytest.raises(UserError):
        parse_size(text)


def test_size_sweep():
    assert size_sweep(1024, 16 * 2**20, 2) == [1024 * 2**k for k in range(15)]
    assert size_sweep(1024, 5000, 4) == [1024, 4096]
    assert size_sweep(100, 100, 2) == [100]
    assert size_sweep(1, 4, 1.5) == [1, 2, 3]  # 1, 1.5, 2.25, 3.375: strictly increasing after rounding
    with pytest.raises(UserError, match="above --max-bytes"):
        size_sweep(2048, 1024, 2)
    with pytest.raises(UserError, match="factor"):
        size_sweep(1024, 4096, 1)
    with pytest.raises(UserError, match="at most 200"):
        size_sweep(1, 2**30, 1.01)


def test_parse_ops():
    assert parse_ops("all_reduce,all-gather,all_reduce") == ["all_reduce", "all_gather"]
    assert parse_ops("all") == list(OPS)
    with pytest.raises(UserError, match="unknown operator 'allreduce'"):
        parse_ops("allreduce")
    with pytest.raises(UserError):
        parse_ops(",")
