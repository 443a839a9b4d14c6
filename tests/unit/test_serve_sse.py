"""Server-sent events: split anywhere, any line ending, streams with and without [DONE]."""
import json

from llmdissect.workloads.serve.client import SSEParser, choice_text

STREAM = (b'data: {"choices":[{"text":"a"}]}\n\n'
          b': keep-alive comment\n\n'
          b'data: {"choices":[{"text":"b"}]}\r\n\r\n'
          b'event: message\ndata: {"choices":[{"delta":{"content":"c"}}],\ndata: "x":1}\n\n'
          b'data: [DONE]\n\n')


def _events(chunks):
    p = SSEParser()
    out = []
    for c in chunks:
        out.extend(p.feed(c))
    return out + p.close()


def test_whole_stream():
    ev = _events([STREAM])
    assert ev[-1] == "[DONE]"
    assert [choice_text(json.loads(e))[0] for e in ev[:-1]] == ["a", "b", "c"]
    assert json.loads(ev[2])["x"] == 1  # two data lines joined with a newline


def test_every_split_point_gives_the_same_events():
    want = _events([STREAM])
    for i in range(len(STREAM)):
        assert _events([STREAM[:i], STREAM[i:]]) == want, i
    assert _events([bytes([b]) for b in STREAM]) == want


def test_stream_that_just_closes_keeps_its_last_event():
    # transformers serve: no [DONE]; a server may also omit the final blank line
    assert _events([b'data: {"a":1}\n\ndata: {"b":2}']) == ['{"a":1}', '{"b":2}']
    assert _events([b'data: {"a":1}\r']) == ['{"a":1}']
    assert _events([b"<html>not sse</html>"]) == []


def test_utf8_split_across_chunks():
    data = 'data: {"choices":[{"text":"héllo ✓"}]}\n\n'.encode()
    cut = data.index("✓".encode()) + 1
    (ev,) = _events([data[:cut], data[cut:]])
    assert choice_text(json.loads(ev)) == ("héllo ✓", None)


def test_choice_text_of_chat_and_completion_objects():
    assert choice_text({"choices": [{"delta": {"role": "assistant"}}]}) == ("", None)
    assert choice_text({"choices": [{"text": "", "finish_reason": "length"}]}) == ("", "length")
    assert choice_text({"choices": [{"message": {"content": "hi"}, "finish_reason": "stop"}]}) == ("hi", "stop")
    assert choice_text({"choices": []}) == ("", None)
