"""What the sync and async clients share of streaming: the server-sent
events reader, and the bookkeeping that makes a reconnected stream yield
every event exactly once.

The server numbers each stored event of a session (``id:`` 0, 1, 2, ...)
and, given ``Last-Event-ID: N``, resumes right after N. Token deltas
(``llm.token.delta``) and tool progress (``tool.progress``) are live only
and carry no id: they pass through as they come, and those sent while the
client was away are gone (the ``message`` that follows holds the whole
reply, the tool's result message its outcome).
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Optional

from ._event import Event
from .errors import StreamError

#: The turn's last events.
TURN_ENDS = frozenset({"turn.done", "turn.failed"})


#: A frame as the reader makes it, before the stream types it.
RawEvent = Event[str, Any]


class SseReader:
    """Server-sent events from bytes as they arrive (any split), per the
    HTML standard's parsing rules; an event larger than ``max_bytes`` is a
    :class:`StreamError` rather than unbounded memory."""

    def __init__(self, max_bytes: int) -> None:
        self._max = max_bytes
        self._buffer = b""
        self._event = ""
        self._data: List[str] = []
        self._size = 0
        self._id: Optional[str] = None
        self._skip_lf = False

    def feed(self, chunk: bytes) -> List[RawEvent]:
        """The events ``chunk`` completes."""
        out: List[RawEvent] = []
        if self._skip_lf and chunk.startswith(b"\n"):
            chunk = chunk[1:]
        self._skip_lf = False
        self._buffer += chunk
        while True:
            cr, lf = self._buffer.find(b"\r"), self._buffer.find(b"\n")
            ends = [i for i in (cr, lf) if i >= 0]
            if not ends:
                break
            end = min(ends)
            line = self._buffer[:end]
            if self._buffer[end : end + 1] == b"\r":
                if end + 1 == len(self._buffer):
                    # A CR at the end of what arrived: its LF may follow.
                    self._skip_lf = True
                    self._buffer = b""
                elif self._buffer[end + 1 : end + 2] == b"\n":
                    self._buffer = self._buffer[end + 2 :]
                else:
                    self._buffer = self._buffer[end + 1 :]
            else:
                self._buffer = self._buffer[end + 1 :]
            event = self._line(line.decode("utf-8", "replace"))
            if event is not None:
                out.append(event)
        if len(self._buffer) + self._size > self._max:
            raise StreamError(f"an event is larger than max_event_bytes ({self._max})")
        return out

    def _line(self, line: str) -> Optional[RawEvent]:
        if line == "":
            return self._dispatch()
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
            self._size += len(value) + 1
            if self._size > self._max:
                raise StreamError(f"an event is larger than max_event_bytes ({self._max})")
        elif name == "id" and "\0" not in value:
            self._id = value
        return None

    def _dispatch(self) -> Optional[RawEvent]:
        event, data, seq = self._event or "message", self._data, self._id
        self._event, self._data, self._size, self._id = "", [], 0, None
        if not data:
            return None
        text = "\n".join(data)
        try:
            value = json.loads(text)
        except ValueError as e:
            raise StreamError(f"event `{event}` has data that is not JSON: {e}") from None
        number: Optional[int] = None
        if seq is not None and seq.isdigit():
            number = int(seq)
        return Event(event, value, number)


class Resume:
    """Which events a stream yields, across reconnects: each stored event
    once, in order (by ``id``), and, for a turn's stream, only that turn's
    events, ending after its ``turn.done`` or ``turn.failed``."""

    def __init__(self, after: Optional[int] = None, turn_id: Optional[str] = None) -> None:
        #: The id of the last stored event yielded (or the one to start after).
        self.last_id = after
        #: The turn followed, if any.
        self.turn_id = turn_id
        #: Whether the turn's ``turn.started`` has passed.
        self.in_turn = False
        #: Set once the turn's last event is yielded.
        self.done = False
        #: Whether anything arrived since the last reconnect.
        self.progressed = False

    def accept(self, event: RawEvent) -> bool:
        """Whether to yield ``event`` (updating what has been seen)."""
        if event.id is not None:
            if self.last_id is not None and event.id <= self.last_id:
                return False
            self.last_id = event.id
            self.progressed = True
        if self.turn_id is None:
            return True
        if event.event == "turn.started" and event.turn_id == self.turn_id:
            self.in_turn = True
        if not self.in_turn:
            return False
        if event.event in TURN_ENDS and event.turn_id == self.turn_id:
            self.done = True
        return True

    def headers(self) -> Dict[str, str]:
        """The headers of a reconnect."""
        return {} if self.last_id is None else {"Last-Event-ID": str(self.last_id)}


def backoff(attempt: int) -> float:
    """Seconds to wait before reconnect number ``attempt`` (1, 2, ...)."""
    return float(min(0.1 * 2 ** (attempt - 1), 2.0))
