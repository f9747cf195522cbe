"""The mapping between the protocol types and the WIT types of ``subs:agent``.

The Python twin of ``engine/protocol/src/wit.rs``: componentize-py generates
one dataclass per WIT record (``wit_world.imports.subs_agent_types``) with the
same snake_case field names as the protocol dataclasses, so the mapping
follows the protocol types' annotations and only the places where WIT and
JSON differ are written out:

- every value of any JSON (``Any``) crosses as JSON text;
- string enums (``Literal``) are WIT ``enum``\\ s; tagged unions are WIT
  ``variant``\\ s (``Action_ToolResult(ToolResult(...))``); a message's
  ``content`` is ``Content_Text`` or ``Content_Parts``;
- ``ToolCall.type`` is the WIT field ``kind``; ``tool.error`` and
  ``llm.error`` share the record ``call-error``; a ``client.messages`` trigger
  is a ``client-messages-trigger`` (``subs:agent/branch``'s sends its view's
  leading messages as a count of the branch's: :func:`request_from_branch_wit`),
  a ``client.action`` one a ``client-action-trigger``;
  ``WorkerIdentity.metadata`` is a list of pairs;
- an ``llm.execute`` request is ``standard(llm-request)`` when the typed
  record holds it exactly (and no ``format`` is set), else ``native(json)``;
  an ``llm.result`` response likewise;
- a request's ``message_tree`` does not repeat the active path: a node's
  message is ``active(i)`` (``messages[i]``) or ``other(message)``, its parent
  ``root``, ``node(j)`` (an earlier node) or ``id(string)``.

The mapping is lossless both ways. The generated module is only there inside
a component (or wherever the bindings were generated); every function takes
it as ``w``, defaulting to the component's.
"""

import dataclasses
import importlib
from typing import Any, Callable, Dict, List, Optional, Tuple, Type, TypeVar, Union, get_args, get_origin

from . import protocol as p
from .branch import BranchError, ClientView, Messages
from .protocol import ProtocolError

_NONE = type(None)
_T = TypeVar("_T")

# Each string enum of the protocol and its WIT enum's name.
_ENUMS: Dict[Any, str] = {
    p.Role: "Role",
    p.Handler: "Handler",
    p.LlmHandler: "LlmHandler",
    p.ToolHandler: "ToolHandler",
    p.LlmFormat: "LlmFormat",
    p.ReasoningEffort: "ReasoningEffort",
    p.ErrorCode: "ErrorCode",
    p.CallKind: "CallKind",
    p.CallStatus: "CallStatus",
}

# Unions: the WIT variant of each base, and of each member its case and
# payload: a record (by name), the value of its one field ("=field"), or none.
_UNIONS: Dict[type, str] = {
    p.ContentPart: "ContentPart",
    p.ToolInput: "ToolInput",
    p.Trigger: "Trigger",
    p.Action: "Action",
    p.ClientInput: "ClientInput",
}
_CASES: Dict[type, Tuple[str, Optional[str]]] = {
    p.TextPart: ("Text", "=text"),
    p.ImageUrlPart: ("ImageUrl", "=image_url"),
    p.FilePart: ("File", "=file"),
    p.InputAudioPart: ("InputAudio", "=input_audio"),
    p.VideoUrlPart: ("VideoUrl", "=video_url"),
    p.ValidInput: ("Valid", "=value"),
    p.InvalidInput: ("Invalid", "InvalidInput"),
    p.MalformedInput: ("Malformed", "=error"),
    p.SessionStart: ("SessionStart", None),
    p.ClientMessages: ("ClientMessages", "ClientMessagesTrigger"),
    p.ClientAction: ("ClientAction", "ClientActionTrigger"),
    p.ToolExecute: ("ToolExecute", "ToolExecute"),
    p.ToolFinished: ("ToolFinished", "ToolFinished"),
    p.LlmExecute: ("LlmExecute", "LlmExecute"),
    p.LlmFinished: ("LlmFinished", "LlmFinished"),
    p.SubAgentFinished: ("SubAgentFinished", "SubAgentFinished"),
    p.InterruptResumed: ("InterruptResumed", "InterruptResumed"),
    p.LlmCall: ("LlmCall", "LlmCall"),
    p.ToolCallAction: ("ToolCall", "ToolCallAction"),
    p.ToolResult: ("ToolResult", "ToolResult"),
    p.ToolError: ("ToolError", "CallError"),
    p.LlmResult: ("LlmResult", "LlmResult"),
    p.LlmError: ("LlmError", "CallError"),
    p.SubAgentSpawn: ("SubAgentSpawn", "SubAgentSpawn"),
    p.MessageSend: ("MessageSend", "MessageSend"),
    p.Interrupt: ("Interrupt", "Interrupt"),
    p.Done: ("Done", "Done"),
    p.ClientMessageInput: ("ClientMessage", "ClientMessageInput"),
    p.ClientMessagesInput: ("ClientMessages", "ClientMessagesInput"),
    p.ClientActionInput: ("ClientAction", "ClientActionInput"),
    p.InterruptResumeInput: ("InterruptResume", "InterruptResumeInput"),
    p.ToolResultInput: ("ToolResult", "ToolResultInput"),
    p.ToolErrorInput: ("ToolError", "ToolErrorInput"),
}
# WIT variant class name (`Action_ToolResult`) -> protocol class.
_BY_WIT_CASE: Dict[str, type] = {}
for _cls, (_case, _payload) in _CASES.items():
    _base = next(b for b in _cls.__mro__ if b in _UNIONS)
    _BY_WIT_CASE[f"{_UNIONS[_base]}_{_case}"] = _cls


def bindings() -> Any:
    """The generated ``subs:agent/types`` module of the component.

    componentize-py generates it for each component, so the SDK has no
    static view of it (the bindings are ``Any`` to a type checker)."""
    return importlib.import_module("wit_world.imports.subs_agent_types")


# ---- JSON text --------------------------------------------------------------


def json_text(value: Any) -> str:
    """A value of any JSON as the text that crosses."""
    try:
        return p.dump_json(p.jsonable(value))
    except (TypeError, ValueError) as e:
        raise ProtocolError(f"not JSON: {e}") from None


def json_value(text: str) -> Any:
    """The value of JSON text that crossed."""
    try:
        return p.parse_json(text)
    except ValueError as e:
        raise ProtocolError(f"invalid JSON text: {e}") from None


def _strict_equal(a: Any, b: Any) -> bool:
    """JSON equality as serde_json's ``Value`` has it: ``1`` is not ``1.0``,
    ``true`` is not ``1``, key order does not matter."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_strict_equal(v, b[k]) for k, v in a.items())
    if isinstance(a, list):
        return len(a) == len(b) and all(_strict_equal(x, y) for x, y in zip(a, b))
    return bool(a == b)


def exact_typed(cls: Type[_T], value: Any) -> Optional[_T]:
    """The typed form of ``value`` when that form holds it exactly (parsing
    drops unknown fields and may change how numbers are written)."""
    try:
        typed = p.from_json(cls, value)
    except ProtocolError:
        return None
    return typed if _strict_equal(p.to_value(typed), value) else None


# ---- protocol -> WIT --------------------------------------------------------


def to_wit(value: Any, w: Any = None) -> Any:
    """A protocol value (a dataclass of :mod:`subs_sdk.protocol`) as the WIT
    value of the generated bindings ``w``."""
    if w is None:
        w = bindings()
    return _to(type(value), value, w)


def _to(tp: Any, value: Any, w: Any) -> Any:
    if tp is Any:  # required: None is JSON null
        return json_text(value)
    if value is None:
        return None
    if tp in (str, int, bool):
        return value
    if tp is float:
        return float(value)
    origin = get_origin(tp)
    if origin is Union:
        args = [a for a in get_args(tp) if a is not _NONE]
        if len(args) == 1:
            return _to(args[0], value, w)
        if isinstance(value, str):  # Content
            return w.Content_Text(value)
        return w.Content_Parts([_to(p.ContentPart, part, w) for part in value])
    if tp in _ENUMS:
        return getattr(w, _ENUMS[tp])[value.upper()]
    if origin is list:
        (item,) = get_args(tp)
        out = []
        for i, v in enumerate(value):
            try:
                out.append(_to(item, v, w))
            except ProtocolError as e:
                raise e.in_index(i) from None
        return out
    if isinstance(value, p._Tagged):
        return _variant_to(value, w)
    return _record_to(type(value), type(value).__name__, value, w)


def _variant_to(value: Any, w: Any) -> Any:
    cls = type(value)
    base = next(b for b in cls.__mro__ if b in _UNIONS)
    case, payload = _CASES[cls]
    make = getattr(w, f"{_UNIONS[base]}_{case}")
    if payload is None:
        return make()
    if payload.startswith("="):
        name = payload[1:]
        tp = dict((n, t) for n, t, _o, _k in p._plan(cls))[name]
        return make(_to(tp, getattr(value, name), w))
    return make(_record_to(cls, payload, value, w))


def _record_to(cls: type, wit_name: str, value: Any, w: Any) -> Any:
    kwargs: Dict[str, Any] = {}
    for name, tp, _optional, _keep in p._plan(cls):
        v = getattr(value, name)
        try:
            special = _SPECIAL_TO.get((cls, name))
            if special is not None:
                name, v = special(value, w)
            else:
                v = _to(tp, v, w)
        except ProtocolError as e:
            raise e.in_field(name) from None
        kwargs[name] = v
    return getattr(w, wit_name)(**kwargs)


def _tool_call_kind(value: p.ToolCall, w: Any) -> Tuple[str, Any]:
    return "kind", value.type


def _metadata_to(value: p.WorkerIdentity, w: Any) -> Tuple[str, Any]:
    m = value.metadata
    return "metadata", None if m is None else list(m.items())


def _request_body_to(value: p.LlmExecute, w: Any) -> Tuple[str, Any]:
    if value.format is None:
        typed = exact_typed(p.LlmRequest, value.request)
        if typed is not None:
            return "request", w.LlmRequestBody_Standard(_to(p.LlmRequest, typed, w))
    return "request", w.LlmRequestBody_Native(json_text(value.request))


def _response_body_to(value: p.LlmResult, w: Any) -> Tuple[str, Any]:
    typed = exact_typed(p.LlmResponse, value.response)
    if typed is not None:
        return "response", w.LlmResponseBody_Standard(_to(p.LlmResponse, typed, w))
    return "response", w.LlmResponseBody_Native(json_text(value.response))


def _tree_to(value: p.DecisionRequest, w: Any) -> Tuple[str, Any]:
    tree, path = value.message_tree, value.messages
    seen: Dict[str, int] = {}
    nodes = []
    following = 0
    for k, node in enumerate(tree.nodes):
        if node.parent_id is None:
            parent = w.TreeParent_Root()
        elif node.parent_id in seen:
            parent = w.TreeParent_Node(seen[node.parent_id])
        else:
            parent = w.TreeParent_Id(node.parent_id)
        seen.setdefault(node.message.id, k)
        if following < len(path) and path[following] == node.message:
            message = w.TreeMessage_Active(following)
            following += 1
        else:
            message = w.TreeMessage_Other(_to(p.Message, node.message, w))
        nodes.append(w.TreeNode(message=message, parent=parent))
    return "message_tree", w.MessageTree(nodes=nodes, head_id=tree.head_id)


# A field whose WIT form differs: its WIT name and value, from the
# protocol value holding it and the bindings.
_SpecialTo = Callable[[Any, Any], Tuple[str, Any]]
_SPECIAL_TO: Dict[Tuple[type, str], _SpecialTo] = {
    (p.ToolCall, "type"): _tool_call_kind,
    (p.WorkerIdentity, "metadata"): _metadata_to,
    (p.LlmExecute, "request"): _request_body_to,
    (p.LlmResult, "response"): _response_body_to,
    (p.DecisionRequest, "message_tree"): _tree_to,
}


# ---- WIT -> protocol --------------------------------------------------------


def from_wit(tp: Any, value: Any) -> Any:
    """The protocol value of type ``tp`` of a WIT value. Fails (with a
    :class:`~subs_sdk.protocol.ProtocolError` naming the field) only where
    JSON text does not parse, or a tree index points nowhere."""
    return _from_conv(tp)(value)


# The conversions are compiled: one function per protocol type, made once
# and kept (at import, where a component's snapshot keeps them), so that a
# decision does no type introspection. A request of 20 messages read by
# walking the annotations at every value took 0.7 ms natively and more in
# a component, most of a decision.
_FROM: Dict[Any, Callable[[Any], Any]] = {}


def _from_conv(tp: Any) -> Callable[[Any], Any]:
    conv = _FROM.get(tp)
    if conv is None:
        # A forward reference first, in case a type contains itself.
        slot: List[Callable[[Any], Any]] = []
        _FROM[tp] = lambda v: slot[0](v)
        conv = _make_from(tp)
        slot.append(conv)
        _FROM[tp] = conv
    return conv


def _same(v: Any) -> Any:
    return v


def _make_from(tp: Any) -> Callable[[Any], Any]:
    if tp is Any:
        return lambda v: None if v is None else json_value(v)
    if tp in (str, int, bool, float):
        return _same
    origin = get_origin(tp)
    if origin is Union:
        args = [a for a in get_args(tp) if a is not _NONE]
        if len(args) == 1:
            return _from_conv(args[0])
        parts = _from_conv(List[p.ContentPart])

        def content(v: Any) -> Any:
            if v is None:
                return None
            if type(v).__name__ == "Content_Text":
                return v.value
            return parts(v.value)

        return content
    if tp in _ENUMS:
        return lambda v: None if v is None else v.name.lower()
    if origin is list:
        (item_tp,) = get_args(tp)
        item = _from_conv(item_tp)
        if item is _same:
            return lambda v: None if v is None else list(v)

        def items(v: Any) -> Any:
            if v is None:
                return None
            try:
                return [item(x) for x in v]
            except ProtocolError:
                pass
            for i, x in enumerate(v):  # again, to name the item
                try:
                    item(x)
                except ProtocolError as e:
                    raise e.in_index(i) from None
            raise AssertionError("a conversion failed once, not twice")

        return items
    if isinstance(tp, type) and tp in _UNIONS:
        return _make_variant_from(tp)
    return _make_record_from(tp)


def _make_variant_from(base: type) -> Callable[[Any], Any]:
    cases: Dict[str, Callable[[Any], Any]] = {}
    for wit_case, cls in _BY_WIT_CASE.items():
        if not issubclass(cls, base):
            continue
        _case, payload = _CASES[cls]
        if payload is None:

            def empty(v: Any, cls: type = cls) -> Any:
                return cls()

            cases[wit_case] = empty
        elif payload.startswith("="):
            name = payload[1:]
            conv = _from_conv(dict((n, t) for n, t, _o, _k in p._plan(cls))[name])

            def one(v: Any, cls: type = cls, name: str = name, conv: Callable[[Any], Any] = conv) -> Any:
                try:
                    return cls(**{name: conv(v.value)})
                except ProtocolError as e:
                    raise e.in_field(name) from None

            cases[wit_case] = one
        else:
            record = _make_record_from(cls)

            def of_record(v: Any, record: Callable[[Any], Any] = record) -> Any:
                return record(v.value)

            cases[wit_case] = of_record

    def variant(v: Any) -> Any:
        if v is None:
            return None
        return cases[type(v).__name__](v)

    return variant


def _make_record_from(cls: type, skip: Tuple[str, ...] = ()) -> Callable[[Any], Any]:
    # (field, its special conversion or None, its plain one: unused when special)
    plan: List[Tuple[str, Optional[_SpecialFrom], Callable[[Any], Any]]] = []
    for name, tp, _optional, _keep in p._plan(cls):
        if name in skip:
            continue
        special = _SPECIAL_FROM.get((cls, name))
        plan.append((name, special, _same if special is not None else _from_conv(tp)))
    new = object.__new__

    def record(v: Any) -> Any:
        if v is None:
            return None
        fields: Dict[str, Any] = {}
        for name, special, conv in plan:
            try:
                if special is not None:
                    fields[name] = special(v, fields)
                else:
                    fields[name] = conv(getattr(v, name))
            except ProtocolError as e:
                raise e.in_field(name) from None
        # Every field is set, and the protocol's dataclasses check nothing
        # in `__init__`: filling the instance directly skips the call.
        out: Any = new(cls)
        out.__dict__.update(fields)
        return out

    return record


# A field whose WIT form differs: its protocol value, from the WIT record
# holding it and the fields converted before it.
_SpecialFrom = Callable[[Any, Dict[str, Any]], Any]


def _tool_call_type(value: Any, done: Dict[str, Any]) -> str:
    kind: str = value.kind
    return kind


def _metadata_from(value: Any, done: Dict[str, Any]) -> Optional[Dict[str, str]]:
    return None if value.metadata is None else dict(value.metadata)


def _request_body_from(value: Any, done: Dict[str, Any]) -> Any:
    body = value.request
    if type(body).__name__ == "LlmRequestBody_Standard":
        return p.to_value(from_wit(p.LlmRequest, body.value))
    return json_value(body.value)


def _response_body_from(value: Any, done: Dict[str, Any]) -> Any:
    body = value.response
    if type(body).__name__ == "LlmResponseBody_Standard":
        return p.to_value(from_wit(p.LlmResponse, body.value))
    return json_value(body.value)


def _bad_index(node: int, field: str, what: str, index: int) -> ProtocolError:
    return (
        ProtocolError(f"refers to {what} {index}, which does not exist")
        .in_field(field)
        .in_index(node)
        .in_field("nodes")
    )


def _view_from(value: Any, done: Dict[str, Any]) -> ClientView:
    return ClientView(_drafts_from(value.messages))


def _tree_from(value: Any, done: Dict[str, Any]) -> p.MessageTree:
    return tree_from_wit(value.message_tree, done["messages"])


def tree_from_wit(tree: Any, path: List[p.Message]) -> p.MessageTree:
    """The protocol's message tree of a WIT ``message-tree``, whose active
    nodes refer to ``path`` (the active path) by index."""
    nodes: List[p.TreeNode] = []
    for k, node in enumerate(tree.nodes):
        m = node.message
        if type(m).__name__ == "TreeMessage_Active":
            if not 0 <= m.value < len(path):
                raise _bad_index(k, "message", "message", m.value)
            message = path[m.value]
        else:
            try:
                message = from_wit(p.Message, m.value)
            except ProtocolError as e:
                raise e.in_field("message").in_index(k).in_field("nodes") from None
        parent = node.parent
        kind = type(parent).__name__
        if kind == "TreeParent_Root":
            parent_id = None
        elif kind == "TreeParent_Id":
            parent_id = parent.value
        elif 0 <= parent.value < k:
            parent_id = nodes[parent.value].message.id
        else:
            raise _bad_index(k, "parent", "an earlier node", parent.value)
        nodes.append(p.TreeNode(message=message, parent_id=parent_id))
    return p.MessageTree(nodes=nodes, head_id=tree.head_id)


_SPECIAL_FROM: Dict[Tuple[type, str], _SpecialFrom] = {
    (p.ToolCall, "type"): _tool_call_type,
    (p.WorkerIdentity, "metadata"): _metadata_from,
    (p.LlmExecute, "request"): _request_body_from,
    (p.LlmResult, "response"): _response_body_from,
    (p.ClientMessages, "messages"): _view_from,
    (p.DecisionRequest, "message_tree"): _tree_from,
}


# ---- subs:agent@0.2.0: the branch read on demand ---------------------------

# `subs:agent/branch`'s `decision-request`: `types`' without the branch, its
# trigger converted with the branch at hand (`_branch_trigger_from`).
_branch_request_from = _make_record_from(p.DecisionRequest, skip=("messages", "message_tree", "trigger"))


def request_from_branch_wit(value: Any, messages: Any) -> p.DecisionRequest:
    """The protocol request of a ``subs:agent/branch`` ``decision-request``
    and its ``messages`` resource: ``request.messages`` reads the branch
    from the resource as the agent's code asks (see
    :class:`~subs_sdk.branch.Messages`), ``request.message_tree`` the tree
    when it is first asked for, and a ``client.messages`` trigger's view
    its shared messages from ``request.messages``
    (:class:`~subs_sdk.branch.ClientView`)."""
    request: p.DecisionRequest = _branch_request_from(value)
    branch = Messages.lazy(ResourceSource(messages))
    request.__dict__["messages"] = branch
    try:
        request.__dict__["trigger"] = _branch_trigger_from(value.trigger, branch)
    except ProtocolError as e:
        raise e.in_field("trigger") from None
    return request


def _branch_trigger_from(value: Any, branch: Messages) -> p.Trigger:
    """A ``subs:agent/branch`` trigger: ``types``' but for
    ``client.messages``, whose view is the branch's first ``shared``
    messages, then ``rest``."""
    if type(value).__name__ != "Trigger_ClientMessages":
        trigger: p.Trigger = _trigger_from(value)
        return trigger
    v = value.value
    try:
        rest = _drafts_from(v.rest)
    except ProtocolError as e:
        raise e.in_field("messages") from None
    try:
        client = _client_from(v.client)
    except ProtocolError as e:
        raise e.in_field("client") from None
    out: p.ClientMessages = object.__new__(p.ClientMessages)
    out.__dict__.update(messages=ClientView.sharing(branch, v.shared, rest), new_from=v.new_from, client=client)
    return out


class ResourceSource:
    """The engine's ``messages`` resource as a
    :class:`~subs_sdk.branch.MessageSource`: each method one call to the
    engine, converting only the messages it returns. A read the engine
    refuses (the resource's decision is over) raises
    :class:`~subs_sdk.branch.BranchError` with its reason."""

    __slots__ = ("_resource",)

    def __init__(self, resource: Any):
        self._resource = resource

    def _call(self, method: str, *args: Any) -> Any:
        try:
            return getattr(self._resource, method)(*args)
        except BranchError:
            raise
        except Exception as e:  # componentize-py's `Err(reason)`
            reason = getattr(e, "value", e)
            raise BranchError(f"reading the branch ({method}): {reason}") from None

    def len(self) -> int:
        n: int = self._call("len")
        return n

    def get(self, index: int) -> Optional[p.Message]:
        m = self._call("get", index)
        return None if m is None else _message_from(m)

    def range(self, start: int, end: int) -> List[p.Message]:
        return _messages_from(self._call("range", start, end))

    def last(self, n: int) -> List[p.Message]:
        return _messages_from(self._call("last", n))

    def after(self, id: str) -> Optional[List[p.Message]]:
        after = self._call("after", id)
        return None if after is None else _messages_from(after)

    def position(self, id: str) -> Optional[int]:
        i: Optional[int] = self._call("position", id)
        return i

    def tree(self, path: Messages) -> p.MessageTree:
        tree = self._call("tree")
        # The active nodes are the path's messages: read as a slice, they
        # are kept by index and the path does not count as read whole.
        return tree_from_wit(tree, path[0 : len(path)])


_message_from: Callable[[Any], p.Message] = _from_conv(p.Message)
_messages_from: Callable[[Any], List[p.Message]] = _from_conv(List[p.Message])
_drafts_from: Callable[[Any], List[p.DraftMessage]] = _from_conv(List[p.DraftMessage])
_trigger_from: Callable[[Any], Any] = _from_conv(p.Trigger)
_client_from: Callable[[Any], p.ClientContext] = _from_conv(p.ClientContext)


def _warm() -> None:
    # Compiled here, at import, so that a component's snapshot holds them:
    # compiled inside `decide` they would be compiled again by every
    # decision's fresh instance (4.5 ms of a 9 ms decision, measured).
    for tp in (p.DecisionRequest, p.Message, p.LlmRequest, p.LlmResponse, *_UNIONS):
        _from_conv(tp)


_warm()
