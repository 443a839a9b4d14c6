"""bench comm --passes: a row keeps its quietest pass (comm_child._fold), whole."""
from llmdissect.micro.comm_child import _fold


def _row(samples, first_call):
    median = sorted(samples)[len(samples) // 2]
    return {"op": "all_reduce", "size_bytes": 1024, "time_s": {"median": median, "n": len(samples)},
            "busbw_bytes_per_s": 1024 / median, "first_call_s": first_call, "_samples": list(samples)}


def test_the_pass_with_the_lowest_median_is_kept_whole():
    slow = _row([4e-3, 4.1e-3, 3.9e-3], first_call=9e-3)  # a slow stretch covered this pass
    quiet = _row([4e-4, 4.2e-4, 3e-3], first_call=1e-3)  # one late call, median still quiet
    middle = _row([5e-4, 6e-4, 5.5e-4], first_call=1e-3)
    row = _fold([slow, quiet, middle])
    assert row["time_s"] == {"median": 4.2e-4, "n": 3}
    assert row["busbw_bytes_per_s"] == 1024 / 4.2e-4
    assert row["first_call_s"] == 9e-3  # the first pass's, whose warm-up was the full one
    assert row["passes"] == 3 and "_samples" not in row
