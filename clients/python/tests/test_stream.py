"""The SSE reader and the resume bookkeeping, without a server."""

from __future__ import annotations

import pytest

from subs_client import Event, StreamError
from subs_client._stream import Resume, SseReader


def test_events_split_anywhere_read_the_same() -> None:
    text = b'event: message\r\ndata: {"a":\r\ndata: 1}\r\nid: 7\r\n\r\n: comment\n\nevent: x\ndata: "\xc3\xbc"\n\n'
    for at in range(len(text) + 1):
        reader = SseReader(1024)
        events = reader.feed(text[:at]) + reader.feed(text[at:])
        assert events == [Event("message", {"a": 1}, 7), Event("x", "ü", None)], at


def test_an_event_past_the_bound_is_an_error() -> None:
    with pytest.raises(StreamError, match="max_event_bytes"):
        SseReader(16).feed(b"data: " + b"x" * 32)
    with pytest.raises(StreamError, match="not JSON"):
        SseReader(16).feed(b"data: {\n\n")


def test_a_turn_yields_its_own_events_once() -> None:
    resume = Resume(turn_id="t2")
    seen = [
        Event("turn.started", {"turn_id": "t1"}, 0),
        Event("turn.done", {"turn_id": "t1"}, 1),
        Event("turn.started", {"turn_id": "t2"}, 2),
        Event("llm.token.delta", {"call_id": "c"}),
        Event("message", {}, 3),
        Event("message", {}, 3),
        Event("turn.done", {"turn_id": "t2"}, 4),
    ]
    accepted = [e for e in seen if resume.accept(e)]
    assert [(e.event, e.id) for e in accepted] == [
        ("turn.started", 2),
        ("llm.token.delta", None),
        ("message", 3),
        ("turn.done", 4),
    ]
    assert resume.done and resume.headers() == {"Last-Event-ID": "4"}
