"""A decision's branch: :class:`Messages`, the active path (oldest first)
and the session's message tree, held in memory or read on demand.

An HTTP worker, a native test and a component built against
``subs:agent@0.1.0`` get the whole branch with the request. A component
built against ``subs:agent@0.2.0`` (the default) gets it as the engine's
``messages`` resource instead, and ``request.messages`` reads from it only
what the agent's code asks for, keeping what it read:

- ``len(messages)``: one call, once;
- ``messages[i]`` (``i`` may be negative, ``messages[-1]`` is the newest):
  one call for the message (and one for the length, once, when ``i`` is
  negative); a message read once is not read again;
- ``messages[a:b]``: one call for the slice;
- ``messages.last(n)``, ``messages.after(id)``, ``messages.position(id)``:
  one call each;
- ``messages.tree`` (and ``request.message_tree``): the tree and the whole
  path, once;
- iterating, ``list(messages)``, ``==``, changing it (``append``...): the
  whole path, once, then it is a list in memory.

Each call costs the conversion of just the messages it returns, so a
decision that reads only its trigger costs the same at the thousandth turn
as at the first. A resource is valid only during its decision: a
``Messages`` kept past it (in a global) raises :class:`BranchError` when it
needs to read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Iterable, Iterator, List, MutableSequence, Optional, Protocol, Union, overload

# For the type checker only: the generated types name `Messages` (a
# request's branch), so importing them here at run time would be a cycle.
if TYPE_CHECKING:
    from ._protocol_types import DecisionRequest, Message, MessageTree

__all__ = ["Messages", "MessageSource", "BranchError"]


class BranchError(RuntimeError):
    """The engine refused a read of the branch: the ``messages`` resource
    belongs to a decision that is over. Uncaught, it fails the delivery
    with the engine's reason."""


class MessageSource(Protocol):
    """Where a lazy :class:`Messages` reads from: in a component, the
    engine's ``messages`` resource (the SDK wraps it); in tests, anything
    with these methods. Indices count from 0, the oldest message; ranges
    are half-open and clipped to the path."""

    def len(self) -> int:
        """How many messages the active path has."""
        ...

    def get(self, index: int) -> Optional[Message]:
        """The message at ``index``; ``None`` past the end."""
        ...

    def range(self, start: int, end: int) -> List[Message]:
        """The messages from ``start`` up to, not including, ``end``."""
        ...

    def last(self, n: int) -> List[Message]:
        """The last ``n`` messages (all of them when there are fewer)."""
        ...

    def after(self, id: str) -> Optional[List[Message]]:
        """The messages after the one whose id is ``id``; ``None`` when no
        message of the path has that id."""
        ...

    def position(self, id: str) -> Optional[int]:
        """The index of the message whose id is ``id``."""
        ...

    def tree(self, path: "Messages") -> MessageTree:
        """The session's message tree, its active messages taken from
        ``path``."""
        ...


class Messages(MutableSequence["Message"]):
    """The branch a decision is about: the active path's messages, oldest
    first, and the session's message tree (every message; edits fork it).

    A sequence of :class:`~subs_sdk.Message` (``len``, indexing with
    negative indices and slices, iteration, ``==`` with a list), with the
    questions an agent usually asks answered without reading the rest of a
    lazy branch: :meth:`last`, :meth:`after`, :meth:`position`,
    :attr:`tree`. The module's docs say what each access reads.
    ``Messages(list_of_messages)`` holds a branch in memory, for tests.
    """

    __slots__ = ("_path", "_tree", "_source", "_len", "_read")

    def __init__(self, path: Iterable[Message] = (), tree: Optional[MessageTree] = None):
        self._path: Optional[List[Message]] = list(path)
        self._tree: Optional[MessageTree] = tree
        self._source: Optional[MessageSource] = None
        self._len: Optional[int] = None
        self._read: Dict[int, Message] = {}

    @classmethod
    def lazy(cls, source: MessageSource) -> "Messages":
        """A branch read from ``source`` as the agent's code asks for it."""
        messages = cls()
        messages._path = None
        messages._source = source
        return messages

    @staticmethod
    def of(request: DecisionRequest) -> "Messages":
        """``request.messages``, a :class:`Messages` however the request was
        made (a request's ``messages`` is typed as one; this also wraps a
        list set on it after it was made)."""
        messages: Any = request.messages
        if isinstance(messages, Messages):
            return messages
        held = Messages(messages or [], request.__dict__.get("message_tree"))
        request.__dict__["messages"] = held
        return held

    # -- reading ---------------------------------------------------------

    @property
    def is_read(self) -> bool:
        """Whether the whole path is in memory (always, for a held branch):
        what lets a test tell that an agent read only what it asked for."""
        return self._path is not None

    def _whole(self) -> List[Message]:
        """The path, read whole from the source on first use."""
        if self._path is None:
            n = len(self)
            self._path = self._range(0, n) if n else []
            self._read = {}
        return self._path

    def __len__(self) -> int:
        if self._path is not None:
            return len(self._path)
        if self._len is None:
            assert self._source is not None
            self._len = self._source.len()
        return self._len

    def _index(self, index: int) -> int:
        """``index`` counted from the start; ``IndexError`` outside."""
        n = len(self)
        i = index + n if index < 0 else index
        if not 0 <= i < n:
            raise IndexError("messages index out of range")
        return i

    def _at(self, index: int) -> Message:
        if self._path is not None:
            return self._path[index]
        i = self._index(index)
        message = self._read.get(i)
        if message is None:
            assert self._source is not None
            got = self._source.get(i)
            if got is None:
                raise IndexError("messages index out of range")
            message = self._read[i] = got
        return message

    @overload
    def __getitem__(self, index: int) -> Message: ...

    @overload
    def __getitem__(self, index: slice) -> List[Message]: ...

    def __getitem__(self, index: Union[int, slice]) -> Union[Message, List[Message]]:
        if isinstance(index, slice):
            if self._path is not None:
                return self._path[index]
            wanted = range(*index.indices(len(self)))
            if not wanted:
                return []
            lo, hi = min(wanted), max(wanted) + 1
            span = self._range(lo, hi)
            return span if wanted.step == 1 else [span[i - lo] for i in wanted]
        return self._at(index)

    def _range(self, start: int, end: int) -> List[Message]:
        """Messages ``start`` to ``end`` (within the path), from what is
        read when that covers them, else in one call."""
        if all(i in self._read for i in range(start, end)):
            return [self._read[i] for i in range(start, end)]
        assert self._source is not None
        got = self._source.range(start, end)
        for i, message in enumerate(got, start):
            self._read[i] = message
        return got

    def __iter__(self) -> Iterator[Message]:
        return iter(self._whole())

    def __contains__(self, value: object) -> bool:
        return value in self._whole()

    def __reversed__(self) -> Iterator[Message]:
        return reversed(self._whole())

    def last(self, n: int) -> List[Message]:
        """The last ``n`` messages, oldest first (all of them when there
        are fewer); ``last(1)[0]`` is the newest, as is ``messages[-1]``."""
        if n <= 0:
            return []
        if self._path is not None:
            return self._path[-n:]
        if self._len is not None:
            return self._range(max(0, self._len - n), self._len)
        assert self._source is not None
        return self._source.last(n)

    def after(self, id: str) -> Optional[List[Message]]:
        """The messages after the one whose id is ``id``, oldest first;
        ``None`` when no message of the path has that id."""
        if self._path is not None:
            i = self.position(id)
            return None if i is None else self._path[i + 1 :]
        assert self._source is not None
        return self._source.after(id)

    def position(self, id: str) -> Optional[int]:
        """The index of the message whose id is ``id`` on the active path."""
        if self._path is not None:
            return next((i for i, m in enumerate(self._path) if m.id == id), None)
        assert self._source is not None
        return self._source.position(id)

    @property
    def tree(self) -> MessageTree:
        """The session's message tree: every message, edits forking it, and
        the head of the active path (read once, with the whole path)."""
        if self._tree is None:
            from ._protocol_types import MessageTree

            self._tree = MessageTree() if self._source is None else self._source.tree(self)
        return self._tree

    @tree.setter
    def tree(self, tree: MessageTree) -> None:
        self._tree = tree

    # -- changing (reads the path whole first) -----------------------------

    @overload
    def __setitem__(self, index: int, value: Message) -> None: ...

    @overload
    def __setitem__(self, index: slice, value: Iterable[Message]) -> None: ...

    def __setitem__(self, index: Union[int, slice], value: Any) -> None:
        self._whole()[index] = value

    def __delitem__(self, index: Union[int, slice]) -> None:
        del self._whole()[index]

    def insert(self, index: int, value: Message) -> None:
        self._whole().insert(index, value)

    # -- comparing and showing ---------------------------------------------

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Messages):
            return self._whole() == other._whole()
        if isinstance(other, list):
            return self._whole() == other
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable, like a list

    def __add__(self, other: Iterable[Message]) -> List[Message]:
        return self._whole() + list(other)

    def __radd__(self, other: Iterable[Message]) -> List[Message]:
        return list(other) + self._whole()

    def __repr__(self) -> str:
        if self._path is not None:
            return f"Messages({self._path!r})"
        return f"Messages(<read on demand: {len(self._read)} read, len {self._len!r}>)"
