"""The server dies in the middle of a run: a failed record, finished requests counted, no hang."""
import threading
import time

import pytest
from serve_helpers import start_debug_server

from llmdissect.workloads.serve.loadgen import ServeConfig
from llmdissect.workloads.serve.record import serve_record

pytestmark = pytest.mark.slow


def test_server_killed_mid_run(tmp_path):
    server = start_debug_server(tmp_path)
    try:
        def kill_after_five(done, total):
            if done == 5:  # from inside the run: five answers in, the server dies (SIGKILL)
                threading.Thread(target=server.kill).start()

        t0 = time.monotonic()
        rec, bad = serve_record(ServeConfig(base_url=server.base_url, num_prompts=40, input_len=16, output_len=16,
                                            request_rate=12.0, seed=1, timeout_s=30), on_done=kill_after_five)
        wall = time.monotonic() - t0
    finally:
        server.stop()
    m = rec.metrics
    assert not bad and rec.status == "failed", rec.error
    assert m["completed"] >= 5 and m["failed"] >= 1
    assert m["completed"] + m["failed"] == 40
    assert "requests failed" in rec.error and m["errors"]
    assert wall < 20  # the remaining arrivals fail fast (connection refused), nothing waits for the timeout
