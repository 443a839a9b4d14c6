"""--usd-per-hour on bench infer and bench pretrain (debug-llama, short runs): the record's
cost per million tokens is the price over its measured rate; a bad price is exit 2 first."""
import json

import pytest

from conftest import assert_user_error, run_cli
from llmdissect.results import open_store

pytestmark = pytest.mark.slow


def test_infer_cost_at_the_prefill_and_decode_rates(tmp_path):
    proc = run_cli("bench", "infer", "--model", "debug-llama", "--input-len", "16", "--output-len", "8",
                   "--repeats", "1", "--usd-per-hour", "3.6", "--json", "--db", str(tmp_path / "r.db"), check=True)
    m = json.loads(proc.stdout)["metrics"]
    assert m["usd_per_million_input_tokens"] == pytest.approx(0.001 / m["prefill_tokens_per_s"]["median"] * 1e6)
    assert m["usd_per_million_output_tokens"] == pytest.approx(0.001 / m["decode_tokens_per_s"]["median"] * 1e6)
    _energy_or_why(m, "energy_j_per_output_token", 8)  # batch 1 x 8 tokens x 1 timed call


def _energy_or_why(m, per_token, tokens):
    if m.get("energy_j") is None:  # this machine has no readable counter: the record says why
        assert m["energy_not_measured"]
    else:
        assert m[per_token] == pytest.approx(m["energy_j"] / tokens)


def test_training_cost_per_million_tokens(tmp_path):
    proc = run_cli("bench", "pretrain", "--model", "debug-llama", "--steps", "2", "--warmup", "1", "--seq", "32",
                   "--usd-per-hour", "3.6", "--db", str(tmp_path / "r.db"), check=True)
    assert "USD per million training tokens" in proc.stdout
    with open_store(tmp_path / "r.db") as store:
        (rec,) = store.query(kind="pretrain")
    m = rec.metrics
    assert m["usd_per_million_training_tokens"] == pytest.approx(0.001 / m["tokens_per_s"] * 1e6)
    _energy_or_why(m, "energy_j_per_training_token", 2 * 32)  # 2 steps of one 32-token sequence
    bad = run_cli("bench", "pretrain", "--model", "debug-llama", "--usd-per-hour", "0", "--db", str(tmp_path / "r.db"))
    assert_user_error(bad, "--usd-per-hour must be positive")
