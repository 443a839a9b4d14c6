"""The allocator setting measured children get, and what leaves a user's own alone."""
from llmdissect.measure.allocator import TUNABLES, allocator_env, allocator_setting


def test_children_get_glibc_tunables_that_keep_freed_memory():
    env = allocator_env({})
    assert env == {"GLIBC_TUNABLES": TUNABLES}
    assert "mmap_threshold=33554432" in TUNABLES and "trim_threshold=4294967296" in TUNABLES
    assert allocator_setting({}).startswith("glibc GLIBC_TUNABLES=")


def test_a_users_allocator_or_opt_out_is_left_alone():
    assert allocator_env({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"}) == {}
    assert allocator_env({"LD_PRELOAD": "/usr/lib/libjemalloc.so.2"}) == {}
    assert allocator_env({"LLMDISSECT_MALLOC": "default"}) == {}
    assert allocator_setting({"LLMDISSECT_MALLOC": "default"}) == "glibc defaults"
    assert allocator_setting({"LD_PRELOAD": "libtcmalloc.so"}) == "LD_PRELOAD=libtcmalloc.so"



def test_a_child_process_runs_with_the_setting(monkeypatch):
    from llmdissect.launch import run_child

    monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    monkeypatch.delenv("LLMDISSECT_MALLOC", raising=False)
    r = run_child("llmdissect.launch.probes:echo", {}, threads=1, timeout_s=120)
    assert r.status == "ok", r.output_tail
    assert r.result["glibc_tunables"] == TUNABLES
