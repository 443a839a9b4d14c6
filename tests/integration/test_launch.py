"""The launcher: a crash, an out-of-memory or a hang becomes a status, never a lost run.

Every test runs twice: children started the ordinary way, and children forked from a warm
process (`launch.warm`, what the quick suite uses), which must behave the same."""
import os
import time

import pytest

from llmdissect.launch import run_child, warm
from llmdissect.launch.warm import WarmLauncher

PROBES = "llmdissect.launch.probes"


@pytest.fixture(scope="module")
def _warm_process():
    launcher = WarmLauncher(threads=2)
    yield launcher
    launcher.close()


@pytest.fixture(params=["subprocess", "warm"], autouse=True)
def launch_mode(request):
    launcher = request.getfixturevalue("_warm_process") if request.param == "warm" else None
    with warm.using(launcher):  # what `warm_children()` does
        yield launcher
    assert launcher is None or not launcher.failed, "the warm process broke: later children went the ordinary way"


def test_child_returns_result_and_sets_threads(launch_mode, monkeypatch):
    monkeypatch.setenv("PROBE_VAR", "seen")
    r = run_child(f"{PROBES}:echo", {"x": [1, 2]}, threads=1)
    assert r.status == "ok" and r.result["config"] == {"x": [1, 2]} and r.result["threads"] == 1
    assert r.result["session"] and r.result["env_probe"] == "seen"  # a session of its own, the caller's env
    if launch_mode is None:
        assert r.result["ppid"] == os.getpid()
    else:
        assert r.result["ppid"] == launch_mode.proc.pid and "transformers" in launch_mode.preloaded


def test_timeout_kills_the_child():
    t0 = time.perf_counter()
    r = run_child(f"{PROBES}:sleep", {"seconds": 60}, timeout_s=3)
    assert r.status == "timeout" and time.perf_counter() - t0 < 20


def test_memory_limit_gives_oom():
    r = run_child(f"{PROBES}:allocate", {"bytes": 6 * 2**30}, max_memory_bytes=3 * 2**30)
    assert r.status == "oom", (r.status, r.error)


def test_failure_and_user_error():
    r = run_child(f"{PROBES}:fail", {"message": "boom"})
    assert r.status == "failed" and "boom" in r.error and not r.user_error
    r = run_child(f"{PROBES}:fail", {"user_error": True, "message": "bad option"})
    assert r.status == "failed" and r.user_error and r.error == "bad option"


@pytest.mark.slow
def test_torchrun_two_processes_and_a_dying_rank():
    r = run_child(f"{PROBES}:all_reduce", {}, nproc=2, timeout_s=120)
    assert r.status == "ok" and r.result == {"sum": 3.0, "world_size": 2}
    r = run_child(f"{PROBES}:all_reduce", {"die_rank": 1}, nproc=2, timeout_s=120)
    assert r.status == "failed" and "rank 1" in r.error


def test_a_child_killed_like_the_oom_killer_is_oom_and_a_crash_is_failed_with_its_signal():
    from llmdissect.results.recording import record_from_child

    killed = run_child(f"{PROBES}:die_by_signal", {"signal": "SIGKILL"})
    assert killed.status == "oom" and "SIGKILL" in killed.error and "out-of-memory" in killed.error
    crashed = run_child(f"{PROBES}:die_by_signal", {"signal": "SIGSEGV"})
    assert crashed.status == "failed" and crashed.error.startswith("killed by signal SIGSEGV"), crashed.error
    for child, status, signal_name in ((killed, "oom", "SIGKILL"), (crashed, "failed", "SIGSEGV")):
        record = record_from_child("infer", {"model": "debug-llama"}, child, env={})
        assert record.status == status and signal_name in record.error and record.finished_at
