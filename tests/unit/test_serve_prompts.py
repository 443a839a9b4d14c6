"""Synthetic prompts are exactly --input-len tokens; ShareGPT-style files load locally."""
import json

import pytest

from llmdissect.errors import UserError
from llmdissect.workloads.serve.local_server import write_tokenizer
from llmdissect.workloads.serve.prompts import Tok, dataset_prompts, find_tokenizer, synthetic_prompts


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tok")
    write_tokenizer(folder, 1024, seed=0)
    return Tok(folder)


@pytest.mark.parametrize("n_tokens", [1, 7, 64, 300])
def test_synthetic_prompts_have_exact_length(tok, n_tokens):
    ps = synthetic_prompts(tok, 5, n_tokens, 16, seed=3)
    assert [tok.count(p.text) for p in ps] == [n_tokens] * 5
    assert all(p.input_len == n_tokens and p.output_len == 16 for p in ps)
    assert len({p.text for p in ps}) == 5
    assert synthetic_prompts(tok, 5, n_tokens, 16, seed=3) == ps  # repeatable


def test_the_saved_tokenizer_loads_in_transformers(tok):
    from transformers import AutoTokenizer

    t = AutoTokenizer.from_pretrained(tok.path)
    assert t.eos_token == "</s>" and t.chat_template
    assert t("hello world", add_special_tokens=False)["input_ids"] == tok.encode("hello world")


def test_sharegpt_json_and_jsonl(tmp_path, tok):
    items = [{"conversations": [{"from": "human", "value": "what is up"}, {"from": "gpt", "value": "not much at all"}]},
             {"conversations": [{"from": "gpt", "value": "orphan"}]},
             {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello there"}]}]
    f = tmp_path / "d.json"
    f.write_text(json.dumps(items))
    ps = dataset_prompts(f, 4, tok, None, seed=0)
    assert len(ps) == 4 and {p.text for p in ps} == {"what is up", "hi"}
    by_text = {p.text: p for p in ps}
    assert by_text["hi"].output_len == tok.count("hello there")
    assert dataset_prompts(f, 2, tok, 9)[0].output_len == 9
    g = tmp_path / "d.jsonl"
    g.write_text("\n".join(json.dumps(x) for x in items))
    assert {p.text for p in dataset_prompts(g, 2, None, None)} == {"what is up", "hi"}
    g.write_text("{broken")
    with pytest.raises(UserError, match="neither JSON"):
        dataset_prompts(g, 2, None, None)
    with pytest.raises(UserError, match="cannot read"):
        dataset_prompts(tmp_path / "missing.json", 2, None, None)


def test_find_tokenizer(tmp_path, tok):
    assert find_tokenizer(None, tok.path).path == tok.path
    assert find_tokenizer(None, "some-remote-model") is None
    with pytest.raises(UserError, match="no tokenizer.json"):
        find_tokenizer(str(tmp_path), None)
