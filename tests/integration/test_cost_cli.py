"""--usd-per-hour on bench infer and bench pretrain (debug-llama, short runs): the record's
cost per million tokens is the price over its measured rate; a bad price is exit 2 first."""
import json

import pytest

from conftest import assert_user_error, run_cli

pytestmark = pytest.mark.slow


def test_infer_cost_at_the_prefill_and_decode_rates(tmp_path):
    proc = run_cli("bench", "infer", "--model", "debug-llama", "--input-len", "16", "--output-len", "8",
                   "--repeats", "1", "--usd-per-hour", "3.6", "--json", "--db", str(tmp_path / "r.db"), check=True)
    m = json.loads(proc.stdout)["metrics"]
    assert m["usd_per_million_input_tokens"] == pytest.approx(0.001 / m["prefill_tokens_per_s"]["median"] * 1e6)
    assert m["usd_per_million_output_tokens"] == pytest.approx(0.001 / m["decode_tokens_per_s"]["median"] * 1e6)


def test_training_cost_per_million_tokens(tmp_path):
    proc = run_cli("bench", "pretrain", "--model", "debug-llama", "--steps", "2", "--warmup", "1", "--seq", "32",
                   "--usd-per-hour", "3.6", "--db", str(tmp_path / "r.db"), check=True)
    assert "USD per million training tokens" in proc.stdout
    bad = run_cli("bench", "pretrain", "--model", "debug-llama", "--usd-per-hour", "0", "--db", str(tmp_path / "r.db"))
    assert_user_error(bad, "--usd-per-hour must be positive")
