"""Shared-prefix prompts and multi-turn histories, built without a server."""
import pytest

from llmdissect.errors import UserError
from llmdissect.workloads.serve.local_server import write_tokenizer
from llmdissect.workloads.serve.metrics import RequestResult, prefix_cache
from llmdissect.workloads.serve.prompts import Prompt, Tok
from llmdissect.workloads.serve.sessions import History, make_sessions
from llmdissect.workloads.serve.shared_prefix import prefixed_count, shared_prefix_prompts


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tok")
    write_tokenizer(folder, 1024, seed=0)
    return Tok(folder)


@pytest.mark.parametrize("n, fraction, n_prefixes", [(20, 0.5, 2), (7, 0.3, 3), (10, 1.0, 1), (10, 0.0, 2)])
def test_exactly_the_fraction_carries_a_prefix(tok, n, fraction, n_prefixes):
    ps = shared_prefix_prompts(tok, n, 12, 4, n_prefixes, 24, fraction, seed=1)
    with_prefix = [p for p in ps if p.prefix]
    assert len(with_prefix) == prefixed_count(n, fraction) == round(n * fraction + 1e-9)
    assert len({p.prefix for p in with_prefix}) == min(n_prefixes, len(with_prefix))
    counts = [sum(p.prefix_id == k for p in with_prefix) for k in range(n_prefixes)]
    assert max(counts) - min(counts) <= 1  # the prefixes are shared evenly
    for p in ps:
        assert tok.count(p.prefix + p.text) == p.input_len == (36 if p.prefix else 12)
    assert len({p.text for p in ps}) == n  # each request's own part differs


def test_bad_shared_prefix_parameters(tok):
    with pytest.raises(UserError, match="prefix-fraction"):
        shared_prefix_prompts(tok, 4, 8, 4, 2, 8, 1.5)


def test_history_carries_every_earlier_turn():
    turns = [Prompt(" a b", 2, 3, prefix=" sys"), Prompt(" c", 1, 3), Prompt(" d", 1, 3)]
    (session,) = make_sessions(turns, 3, [0.0])
    chat, text = History(), History()
    for turn, answer in zip(session.turns, ["X", "Y", "Z"]):
        sent_chat, sent_text = chat.request("chat", turn), text.request("completions", turn)
        chat.add("chat", turn, answer)
        text.add("completions", turn, answer)
    assert sent_text == {"prompt": " sys a bX cY d"}
    assert [m["content"] for m in sent_chat["messages"]] == [" sys", " a b", "X", " c", "Y", " d"]
    assert [m["role"] for m in sent_chat["messages"]] == ["system", "user", "assistant", "user", "assistant", "user"]


def test_prefix_cache_hit_rate_only_where_reported():
    told = [RequestResult(0, ok=True, prompt_tokens=100, cached_tokens=60),
            RequestResult(1, ok=True, prompt_tokens=50, cached_tokens=0), RequestResult(2, ok=True, prompt_tokens=9)]
    assert prefix_cache(told)["prefix_cache_hit_rate"] == pytest.approx(0.4)
    assert prefix_cache(told[2:]) == {"prefix_cache_hit_rate": None, "prefix_cache_reported": False}
