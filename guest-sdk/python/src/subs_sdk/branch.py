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

A ``client.messages`` trigger's ``messages`` is a :class:`ClientView`: the
client's view of the conversation. In a component built against
``subs:agent@0.2.0`` the engine sends its leading messages as a count (the
first ``shared`` messages of the branch) and only the rest as messages; the
view reads those leading messages from ``request.messages`` (so a message
read through either is read once), the same way: ``len`` costs nothing,
``view[i]`` and a slice read only the branch's messages they cover
(``view[trigger.new_from:]`` usually none), and iterating reads it whole,
once. Elsewhere it holds the whole view.
"""

from __future__ import annotations

from typing import (
    TYPE_CHECKING,
    Any,
    Dict,
    Iterable,
    Iterator,
    List,
    MutableSequence,
    Optional,
    Protocol,
    TypeVar,
    Union,
    cast,
    overload,
)

# For the type checker only: the generated types name `Messages` (a
# request's branch), so importing them here at run time would be a cycle.
if TYPE_CHECKING:
    from typing import Self

    from ._protocol_types import DecisionRequest, DraftMessage, Message, MessageTree

__all__ = ["Messages", "MessageSource", "ClientView", "BranchError"]


class BranchError(RuntimeError):
    """The engine refused a read of the branch: the ``messages`` resource
    belongs to a decision that is over. Uncaught, it fails the delivery
    with the engine's reason."""


class _HasId(Protocol):
    """A message or a draft: what :meth:`Messages.after` and
    :meth:`Messages.position` look messages up by."""

    @property
    def id(self) -> Optional[str]: ...


_M = TypeVar("_M", bound=_HasId)


class _Source(Protocol[_M]):
    """What a sequence read on demand reads from: :class:`MessageSource`
    without the tree."""

    def len(self) -> int: ...

    def get(self, index: int) -> Optional[_M]: ...

    def range(self, start: int, end: int) -> List[_M]: ...

    def last(self, n: int) -> List[_M]: ...

    def after(self, id: str) -> Optional[List[_M]]: ...

    def position(self, id: str) -> Optional[int]: ...


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


class _OnDemand(MutableSequence[_M]):
    """A sequence held in memory or read on demand from a source, keeping
    what it read: what :class:`Messages` and :class:`ClientView` share
    (the module's docs say what each access reads)."""

    __slots__ = ("_path", "_source", "_len", "_read")

    def __init__(self, path: Iterable[_M] = ()):
        self._path: Optional[List[_M]] = list(path)
        self._source: Optional[_Source[_M]] = None
        self._len: Optional[int] = None
        self._read: Dict[int, _M] = {}

    def _reads(self, source: _Source[_M]) -> Self:
        """``self``, emptied, to be read from ``source``."""
        self._path = None
        self._source = source
        return self

    # -- reading ---------------------------------------------------------

    @property
    def is_read(self) -> bool:
        """Whether the whole sequence is in memory (always, for a held
        one): what lets a test tell that an agent read only what it asked
        for."""
        return self._path is not None

    def _whole(self) -> List[_M]:
        """The sequence, read whole from the source on first use."""
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

    def _at(self, index: int) -> _M:
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
    def __getitem__(self, index: int) -> _M: ...

    @overload
    def __getitem__(self, index: slice) -> List[_M]: ...

    def __getitem__(self, index: Union[int, slice]) -> Union[_M, List[_M]]:
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

    def _range(self, start: int, end: int) -> List[_M]:
        """Messages ``start`` to ``end`` (within the sequence), from what
        is read when that covers them, else in one call."""
        if all(i in self._read for i in range(start, end)):
            return [self._read[i] for i in range(start, end)]
        assert self._source is not None
        got = self._source.range(start, end)
        for i, message in enumerate(got, start):
            self._read[i] = message
        return got

    def __iter__(self) -> Iterator[_M]:
        return iter(self._whole())

    def __contains__(self, value: object) -> bool:
        return value in self._whole()

    def __reversed__(self) -> Iterator[_M]:
        return reversed(self._whole())

    def last(self, n: int) -> List[_M]:
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

    def after(self, id: str) -> Optional[List[_M]]:
        """The messages after the one whose id is ``id``, oldest first;
        ``None`` when no message has that id."""
        if self._path is not None:
            i = self.position(id)
            return None if i is None else self._path[i + 1 :]
        assert self._source is not None
        return self._source.after(id)

    def position(self, id: str) -> Optional[int]:
        """The index of the message whose id is ``id``."""
        if self._path is not None:
            return next((i for i, m in enumerate(self._path) if m.id == id), None)
        assert self._source is not None
        return self._source.position(id)

    # -- changing (reads the sequence whole first) -----------------------

    @overload
    def __setitem__(self, index: int, value: _M) -> None: ...

    @overload
    def __setitem__(self, index: slice, value: Iterable[_M]) -> None: ...

    def __setitem__(self, index: Union[int, slice], value: Any) -> None:
        self._whole()[index] = value

    def __delitem__(self, index: Union[int, slice]) -> None:
        del self._whole()[index]

    def insert(self, index: int, value: _M) -> None:
        self._whole().insert(index, value)

    # -- comparing and showing ---------------------------------------------

    def __eq__(self, other: object) -> bool:
        if isinstance(other, _OnDemand):
            return self._whole() == other._whole()
        if isinstance(other, list):
            return self._whole() == other
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable, like a list

    def __add__(self, other: Iterable[_M]) -> List[_M]:
        return self._whole() + list(other)

    def __radd__(self, other: Iterable[_M]) -> List[_M]:
        return list(other) + self._whole()

    def __repr__(self) -> str:
        name = type(self).__name__
        if self._path is not None:
            return f"{name}({self._path!r})"
        return f"{name}(<read on demand: {len(self._read)} read, len {self._len!r}>)"


class Messages(_OnDemand["Message"]):
    """The branch a decision is about: the active path's messages, oldest
    first, and the session's message tree (every message; edits fork it).

    A sequence of :class:`~subs_sdk.Message` (``len``, indexing with
    negative indices and slices, iteration, ``==`` with a list), with the
    questions an agent usually asks answered without reading the rest of a
    lazy branch: :meth:`last`, :meth:`after`, :meth:`position`,
    :attr:`tree`. The module's docs say what each access reads.
    ``Messages(list_of_messages)`` holds a branch in memory, for tests.
    """

    __slots__ = ("_tree",)

    def __init__(self, path: Iterable[Message] = (), tree: Optional[MessageTree] = None):
        super().__init__(path)
        self._tree: Optional[MessageTree] = tree

    @classmethod
    def lazy(cls, source: MessageSource) -> "Messages":
        """A branch read from ``source`` as the agent's code asks for it."""
        return cls()._reads(source)

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

    @property
    def tree(self) -> MessageTree:
        """The session's message tree: every message, edits forking it, and
        the head of the active path (read once, with the whole path)."""
        if self._tree is None:
            from ._protocol_types import MessageTree

            # A lazy branch's source is the `MessageSource` `lazy` took.
            source = cast(Optional[MessageSource], self._source)
            self._tree = MessageTree() if source is None else source.tree(self)
        return self._tree

    @tree.setter
    def tree(self, tree: MessageTree) -> None:
        self._tree = tree


class ClientView(_OnDemand["DraftMessage"]):
    """A ``client.messages`` trigger's view of the conversation: the
    client's messages, oldest first, as drafts (a message the branch holds
    keeps its id).

    A sequence of :class:`~subs_sdk.DraftMessage`, read as a list reads
    (``len``, indexing with negative indices and slices, iteration, ``==``
    with a list, :meth:`last`, :meth:`after`, :meth:`position`). In a
    component built against ``subs:agent@0.2.0`` its leading messages are
    the branch's, read from ``request.messages`` only when the agent's
    code reads them (:meth:`sharing`); :attr:`is_read` tells whether the
    whole view has been read. ``ClientView(list_of_drafts)`` holds a view
    in memory.
    """

    __slots__ = ()

    @classmethod
    def sharing(cls, branch: Messages, shared: int, rest: Iterable[DraftMessage]) -> "ClientView":
        """The first ``shared`` messages of ``branch``, then ``rest``:
        held when nothing is shared, else read on demand (the branch's
        messages through ``branch``, which keeps what it read). ``shared``
        is not checked against the branch's length, which would read it."""
        rest = list(rest)
        if shared <= 0:
            return cls(rest)
        return cls()._reads(_ViewSource(branch, shared, rest))


class _ViewSource:
    """A view's source: its first ``shared`` messages the branch's, read
    through ``branch`` and made drafts, then ``rest``."""

    __slots__ = ("_branch", "_shared", "_rest", "_drafts")

    def __init__(self, branch: Messages, shared: int, rest: List[DraftMessage]):
        # Imported here, as the module's import would be a cycle, and once
        # per view: an import per message costs twice the draft it makes.
        from ._protocol_types import DraftMessage

        self._branch = branch
        self._shared = shared
        self._rest = rest
        self._drafts = DraftMessage

    def _draft(self, message: Message) -> DraftMessage:
        return self._drafts(
            id=message.id,
            role=message.role,
            content=message.content,
            tool_calls=message.tool_calls,
            tool_call_id=message.tool_call_id,
            name=message.name,
        )

    def len(self) -> int:
        return self._shared + len(self._rest)

    def get(self, index: int) -> Optional[DraftMessage]:
        if index < self._shared:
            try:
                return self._draft(self._branch[index])
            except IndexError:
                return None
        i = index - self._shared
        return self._rest[i] if i < len(self._rest) else None

    def range(self, start: int, end: int) -> List[DraftMessage]:
        shared = self._shared
        out = [self._draft(m) for m in self._branch[start : min(end, shared)]] if start < shared else []
        if end > shared:
            out.extend(self._rest[max(0, start - shared) : end - shared])
        return out

    def last(self, n: int) -> List[DraftMessage]:
        end = self.len()
        return self.range(max(0, end - n), end)

    def after(self, id: str) -> Optional[List[DraftMessage]]:
        i = self.position(id)
        return None if i is None else self.range(i + 1, self.len())

    def position(self, id: str) -> Optional[int]:
        # The branch first: a view's message is found where it first is.
        i = self._branch.position(id)
        if i is not None and i < self._shared:
            return i
        return next((self._shared + k for k, m in enumerate(self._rest) if m.id == id), None)
