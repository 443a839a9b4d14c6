"""How a failed multi-rank child is reported: the rank that died without a word is the cause,
not the rank that then lost its connection to it (launch.child._classify)."""
from llmdissect.launch.child import _classify

TORCHRUN_TAIL = """[rank1]: RuntimeError: Connection reset by peer
Root Cause (first observed failure):
[0]:
  time      : 2026-12-03_21:20:00
  host      : vm
  rank      : 2 (local_rank: 2)
  exitcode  : 17 (pid: 4242)
"""


def test_the_silent_rank_that_died_is_the_cause_and_the_others_what_they_saw():
    result = _classify(None, 1, 3.0, TORCHRUN_TAIL, {1: "RuntimeError: Connection reset by peer"})
    assert result.status == "failed"
    assert result.error.startswith("rank 2 (local_rank: 2) died with exit code 17")
    assert "rank 1 then saw: RuntimeError: Connection reset" in result.error


def test_a_rank_that_reported_its_own_failure_is_named_directly():
    tail = TORCHRUN_TAIL.replace("rank      : 2", "rank      : 1")
    result = _classify(None, 1, 3.0, tail, {1: "ValueError: bad shape"})
    assert result.error == "rank 1: ValueError: bad shape"


def test_a_rank_killed_by_an_abort_says_what_it_printed_before_it():
    tail = """terminate called after throwing an instance of 'gloo::IoException'
  what():  [gloo/transport/tcp/pair.cc:534] Connection closed by peer
E1205 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: -6) local_rank: 1
Root Cause (first observed failure):
[0]:
  rank      : 1 (local_rank: 1)
  exitcode  : -6 (pid: 4064)  (SIGABRT)
"""
    result = _classify({"status": "ok", "result": {}}, 1, 3.0, tail, {})
    assert result.status == "failed"
    assert result.error.startswith("rank 1 (local_rank: 1) died with exit code -6")
    assert result.error.endswith("(what():  [gloo/transport/tcp/pair.cc:534] Connection closed by peer)")


def test_a_silent_rank_among_the_failures_is_the_cause_when_torchrun_names_another_first():
    # rank 1 died by os._exit; rank 0 saw the reset, wrote its error and left in the same
    # instant, so torchrun's "first observed failure" is rank 0 (CI failure, 2026-12-05)
    tail = """Failures:
[1]:
  time      : 2026-12-05_06:43:51
  rank      : 1 (local_rank: 1)
  exitcode  : 17 (pid: 11935)
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  rank      : 0 (local_rank: 0)
  exitcode  : 1 (pid: 11934)
"""
    payload = {"status": "failed", "error": "RuntimeError: [gloo] Connection closed by peer"}
    result = _classify(payload, 1, 3.0, tail, {})
    assert result.error.startswith("rank 1 (local_rank: 1) died with exit code 17")
    assert "rank 0 then saw: RuntimeError: [gloo] Connection closed by peer" in result.error


def test_rank_zero_that_failed_on_its_own_is_named_when_no_rank_died_silently():
    tail = """Root Cause (first observed failure):
[0]:
  rank      : 0 (local_rank: 0)
  exitcode  : 1 (pid: 11934)
"""
    result = _classify({"status": "failed", "error": "ValueError: bad"}, 1, 3.0, tail, {})
    assert result.error == "ValueError: bad"
