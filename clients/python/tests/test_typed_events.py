"""The frames a stream yields, typed by event name, against a stand-in
server that sends the frames the protocol's fixtures hold.

A live ``tool.progress`` frame comes only from a tool source (an MCP
server's progress) of a real server, so the stand-in sends it as the
protocol writes it: the payloads of ``tests/fixtures/protocol/tool_progress``,
which the Rust type reads and writes back unchanged (fixtures.rs). This
file is also checked by ``mypy --strict`` (pyproject.toml): narrowing a
frame by its ``event`` must give its ``data`` the generated type, so a
renamed or retyped field fails the type check, and a field the server
sends but the type lacks (or the reverse) fails the test.
"""

from __future__ import annotations

import asyncio
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterator, List, Optional, Tuple, assert_type

import pytest

from subs_client import AsyncClient, Client, StreamEventFrame
from subs_client.types import ClientToolCall, ToolProgress, TurnDone

FIXTURES = Path(__file__).resolve().parents[3] / "tests" / "fixtures" / "protocol" / "tool_progress"


def progress_fixtures() -> List[Any]:
    """The ``tool.progress`` payloads as the protocol writes them."""
    files = sorted(FIXTURES.glob("*.json"))
    assert files, f"no fixtures under {FIXTURES}"
    return [json.loads(f.read_text()) for f in files]


def frames() -> List[Tuple[str, Any, Optional[int]]]:
    """A turn with a client tool and its call's progress: stored events with
    their ids, progress frames (live) without."""
    out: List[Tuple[str, Any, Optional[int]]] = [("turn.started", {"turn_id": "t1"}, 0)]
    out += [("tool.progress", data, None) for data in progress_fixtures()]
    out.append(("tool.call", {"id": "call_2", "name": "pick", "arguments": "{}", "attempt": 1}, 1))
    out.append(("turn.done", {"turn_id": "t1", "data": None}, 2))
    return out


class _Events(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (the name http.server calls)
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.end_headers()
        for name, data, seq in frames():
            text = f"event: {name}\ndata: {json.dumps(data)}\n"
            if seq is not None:
                text += f"id: {seq}\n"
            self.wfile.write((text + "\n").encode())
        self.wfile.flush()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def events_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Events)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def progress_of(frame: StreamEventFrame) -> Optional[Tuple[str, float, Optional[float], Optional[str]]]:
    """A ``tool.progress`` frame's fields, read as typed code reads them."""
    if frame.event == "tool.progress":
        assert_type(frame.data, ToolProgress)
        data = frame.data
        assert_type(data["progress"], float)
        assert_type(data["total"], Optional[float])
        assert_type(data["message"], Optional[str])
        return data["id"], data["progress"], data["total"], data["message"]
    if frame.event == "tool.call":
        assert_type(frame.data, ClientToolCall)
    if frame.event == "turn.done":
        assert_type(frame.data, TurnDone)
    return None


def mistakes(frame: StreamEventFrame) -> None:
    """What the type check must refuse (never run)."""
    if frame.event == "tool.progress":
        frame.data["percent"]  # type: ignore[typeddict-item]
        frame.data["turn_id"]  # type: ignore[typeddict-item]
    frame.data["progress"]  # type: ignore[typeddict-item]


def check(seen: List[StreamEventFrame]) -> None:
    assert [f.event for f in seen] == [name for name, _, _ in frames()]
    progress = [f for f in seen if f.event == "tool.progress"]
    assert all(f.id is None for f in progress), "progress is live only"
    fields = ToolProgress.__required_keys__ | ToolProgress.__optional_keys__
    for frame, data in zip(progress, progress_fixtures()):
        assert frame.data == data
        assert set(frame.data) == set(fields), "the frame's fields are the generated type's"
    read = [progress_of(f) for f in progress]
    assert read == [(d["id"], d["progress"], d["total"], d["message"]) for d in progress_fixtures()]


def test_a_stream_yields_tool_progress_typed(events_url: str) -> None:
    with Client(events_url, key="subs_x", timeout=10) as subs:
        seen: List[StreamEventFrame] = []
        for frame in subs.events("s1"):
            seen.append(frame)
            if frame.event == "turn.done":
                break
    check(seen)


def test_an_async_stream_yields_tool_progress_typed(events_url: str) -> None:
    async def follow() -> List[StreamEventFrame]:
        async with AsyncClient(events_url, key="subs_x", timeout=10) as subs:
            seen: List[StreamEventFrame] = []
            async for frame in subs.events("s1"):
                seen.append(frame)
                if frame.event == "turn.done":
                    break
            return seen

    check(asyncio.run(follow()))
