"""One frame of a session's event stream, as the client yields it.

Its own module so that the generated ``_protocol_types`` can name it: the
frame unions there (``StreamEventFrame``, ...) are unions of ``Event``
with a literal ``event`` and the ``data`` type of that event.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, Optional, TypeVar

#: The event's name, a literal in the frame unions.
N = TypeVar("N", bound=str, covariant=True)
#: The type of its data.
D = TypeVar("D", covariant=True)


@dataclass(frozen=True)
class Event(Generic[N, D]):
    """One event of a session: ``event`` its name (``turn.started``,
    ``message``, ``llm.token.delta``, ``tool.progress``, ``tool.call``,
    ``interrupt``, ``interrupt.resumed``, ``state``, ``turn.done``,
    ``turn.failed``), ``data`` its JSON data parsed, ``id`` its sequence
    number in the session (``None`` for the live-only ``llm.token.delta``
    and ``tool.progress``).

    The streams yield :data:`~subs_client.types.StreamEventFrame`: comparing
    ``event`` with a name narrows ``data`` to that event's type
    (``if frame.event == "tool.progress": frame.data["progress"]``)."""

    event: N
    data: D
    id: Optional[int] = None

    @property
    def turn_id(self) -> Optional[str]:
        """The turn a ``turn.*`` event is about."""
        data: Any = self.data
        if isinstance(data, dict):
            turn = data.get("turn_id")
            return turn if isinstance(turn, str) else None
        return None
