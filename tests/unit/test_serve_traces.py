"""Trace files: the shipped samples read with their recorded times and lengths; hash ids become
shared token prefixes; malformed files and unknown columns are one clear UserError."""
import pytest

from llmdissect.errors import UserError
from llmdissect.workloads.serve.local_server import write_tokenizer
from llmdissect.workloads.serve.prompts import Tok
from llmdissect.workloads.serve.traces import SAMPLE_FILES, read_trace, trace_offsets, trace_prompts


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tok")
    write_tokenizer(folder, 1024, seed=0)
    return Tok(folder)


@pytest.mark.parametrize("fmt", sorted(SAMPLE_FILES))
def test_samples_read_in_auto_and_named_format(fmt):
    got_fmt, rows = read_trace(SAMPLE_FILES[fmt])
    assert got_fmt == fmt and len(rows) == 12
    assert read_trace(SAMPLE_FILES[fmt], fmt)[1] == rows
    offsets = trace_offsets(rows, 1.0)
    assert offsets[0] == 0 and offsets == sorted(offsets) and offsets[-1] > 0.5
    assert trace_offsets(rows, 0.5)[-1] == pytest.approx(offsets[-1] / 2)


def test_azure_times_keep_seven_fraction_digits(tmp_path):
    f = tmp_path / "a.csv"
    f.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,10,3\n"
                 "2023-11-16 18:15:47.0000001,20,4\n")
    _, rows = read_trace(f)
    assert trace_offsets(rows, 1.0)[1] == pytest.approx(0.3194101, abs=1e-6)
    assert [(r.input_len, r.output_len) for r in rows] == [(10, 3), (20, 4)]


def test_prompts_have_the_recorded_lengths_and_shared_hash_prefixes(tok):
    _, rows = read_trace(SAMPLE_FILES["mooncake"])
    ps = trace_prompts(tok, rows, block_tokens=16)
    assert [tok.count(p.text) for p in ps] == [r.input_len for r in rows]
    assert [p.output_len for p in ps] == [r.output_len for r in rows]
    a, b = rows[0], rows[3]  # both start with hash ids 0, 1: 32 shared tokens
    assert a.hash_ids[:2] == b.hash_ids[:2] and a.hash_ids[2] != b.hash_ids[2]
    ta, tb = tok.encode(ps[0].text), tok.encode(ps[3].text)
    assert ta[:32] == tb[:32] and ta[32:] != tb[32:len(ta)]
    assert tok.encode(ps[1].text)[:16] != ta[:16]  # another chain, another prefix


def test_zero_lengths_are_sent_as_one(tok):
    _, rows = read_trace(SAMPLE_FILES["burstgpt"])
    assert sum(r.output_len == 0 for r in rows) == 1
    assert min(p.output_len for p in trace_prompts(tok, rows)) == 1


@pytest.mark.parametrize("name, text, fragment", [
    ("m.jsonl", '{"timestamp": 1, "input_length": 5, "output_length": 2}\n{"timestamp": 2, "input_len', "line 2"),
    ("m.jsonl", '{"timestamp": 1, "input_length": 5}\n', "no output_length"),
    ("m.jsonl", '{"timestamp": "x", "input_length": 5, "output_length": 2}\n', "timestamp"),
    ("m.jsonl", '{"timestamp": 1, "input_length": -5, "output_length": 2}\n', "negative"),
    ("m.jsonl", '{"timestamp": 1, "input_length": 5, "output_length": 2, "hash_ids": 3}\n', "hash_ids"),
    ("u.csv", "time,prompt,answer\n1,2,3\n", "match no known format"),
    ("a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,5,2\n", "TIMESTAMP"),
    ("a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.1,5\n", "fields"),
    ("b.csv", "Timestamp,Model,Request tokens,Response tokens\n1.0,gpt,five,2\n", "whole number"),
    ("e.csv", "", "match no known format"),
    ("h.csv", "Timestamp,Model,Request tokens,Response tokens\n", "no requests"),
    ("z.csv", b"\x1f\x8b\x08\x00\xff\xfe", "not UTF-8"),
])
def test_malformed_traces_are_one_user_error(tmp_path, name, text, fragment):
    f = tmp_path / name
    f.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(UserError) as e:
        read_trace(f)
    assert fragment.lower() in str(e.value).lower() and "\n" not in str(e.value)


def test_a_named_format_needs_its_columns(tmp_path):
    with pytest.raises(UserError, match="no column TIMESTAMP, ContextTokens"):
        read_trace(SAMPLE_FILES["burstgpt"], "azure")
    with pytest.raises(UserError, match="trace-format"):
        read_trace(SAMPLE_FILES["burstgpt"], "sharegpt")
    with pytest.raises(UserError, match="cannot read"):
        read_trace(tmp_path / "missing.jsonl")


def test_a_byte_order_mark_is_read_past(tmp_path):
    f = tmp_path / "b.csv"
    f.write_bytes(b"\xef\xbb\xbf" + SAMPLE_FILES["burstgpt"].read_bytes())
    assert read_trace(f) == read_trace(SAMPLE_FILES["burstgpt"])
