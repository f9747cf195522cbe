"""The decision protocol's types, and their JSON.

One dataclass per type of the wire reference (`docs/protocol.md`), with the
same field names and the same field order as the JSON: generated from the
Rust `subs-protocol` crate's types (through their JSON Schema) into
``_protocol_types.py`` by ``cargo xtask codegen``, and re-exported here. Optional fields default to ``None`` and are omitted
from the JSON, except the few the protocol writes as ``null``
(``DecisionRequest.agent``, ``deadline`` and ``turn_id``,
``RetryPolicy.timeout_secs``). Values of any JSON (``state``, tool arguments
and results, payloads) are plain Python values: ``dict``, ``list``, ``str``,
``int``, ``float``, ``bool``, ``None``.

Unions tagged by ``type`` (``status`` for :class:`ToolInput`) are class
hierarchies: every :class:`Action` is an instance of one of its subclasses
(:class:`LlmCall`, :class:`ToolResult`, ...), every :class:`Trigger` one of
its (:class:`SessionStart`, :class:`ToolExecute`, ...). A message's
``content`` is a ``str`` or a list of :class:`ContentPart`.

:func:`from_json` reads any protocol type from JSON text or from an already
parsed value, with errors that name the field (``actions[0].name: ...``);
:func:`to_json` and :func:`to_value` write one back. Whole numbers in the
protocol's float fields (``temperature``, retry seconds) are written without
a fraction, as JavaScript does; values of any JSON are written as they are
(see :func:`js_number` for writing a float the JavaScript way).
"""

import dataclasses
import json
import math
import unicodedata
from typing import (
    Any,
    Dict,
    FrozenSet,
    List,
    Literal,
    Optional,
    Tuple,
    Type,
    TypeVar,
    Union,
    get_args,
    get_origin,
    get_type_hints,
    overload,
)


from ._protocol_base import APPROVAL_ARGUMENTS, APPROVAL_CALL_ID, APPROVAL_TOOL, ProtocolError
from ._protocol_base import _Tagged as _Tagged  # the unions' base, for wit.py
from . import _protocol_types
from ._protocol_types import *  # noqa: F403 (every wire type, generated)
from ._protocol_types import ContentPart, DraftMessage, Message
from .branch import ClientView, Messages

# The wire types are generated from the Rust types (`cargo xtask codegen`
# writes _protocol_types.py); this module reads and writes them.
__all__ = [
    "ProtocolError", "from_json", "to_json", "to_value", "js_number", "jsonable", "parse_json", "dump_json",
    "APPROVAL_TOOL", "APPROVAL_CALL_ID", "APPROVAL_ARGUMENTS", "MAX_ID_BYTES", "approval_answer_schema", "valid_id",
]
__all__ += _protocol_types.__all__

#: The modules whose dataclasses are protocol types.
_PROTOCOL_MODULES = frozenset({__name__, _protocol_types.__name__})


# ---- approvals and delegation ------------------------------------------------

#: The most bytes an id may hold (UTF-8), as the engine checks.
MAX_ID_BYTES = 256


def approval_answer_schema() -> Dict[str, Any]:
    """The JSON Schema of the answer to an approval,
    ``{"approved": bool, "reason"?: str}``: the ``resume_schema`` of
    :meth:`Action.approval`'s interrupt, so that the engine refuses any other
    answer (a typo, a missing ``approved``) with a 400 and keeps the approval
    open."""
    return {
        "type": "object",
        "properties": {"approved": {"type": "boolean"}, "reason": {"type": "string"}},
        "required": ["approved"],
        "additionalProperties": False,
    }


def valid_id(id: str) -> bool:
    """Whether the engine accepts ``id`` as an id: 1 to :data:`MAX_ID_BYTES`
    bytes, no control characters."""
    return 0 < len(id.encode("utf-8")) <= MAX_ID_BYTES and not any(unicodedata.category(c) == "Cc" for c in id)


def _bounded_id(id: str) -> str:
    """``id`` when it is a valid id, else a short one derived from it: ids
    composed from the engine's own may outgrow what an id may hold."""
    if valid_id(id):
        return id
    # FNV-1a, as the Rust SDK: the same ids must come back on a redelivery,
    # which Python's salted `hash` does not promise.
    h = 0xCBF29CE484222325
    for b in id.encode("utf-8"):
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"delegate.{h:016x}"


# ---- JSON -----------------------------------------------------------------

_NONE = type(None)
_U32_MAX = 2**32 - 1
_MAX_SAFE_INTEGER = 2**53 - 1

# Per class: its fields as (name, type, optional, keep_null), computed once
# (at import: a component snapshots them with the module).
_Plan = List[Tuple[str, Any, bool, bool]]
_PLANS: Dict[type, _Plan] = {}


def _plan(cls: type) -> _Plan:
    plan = _PLANS.get(cls)
    if plan is None:
        # In the generated module's names: the method mixins' annotations
        # (in the MRO) name the types only for the type checker.
        hints = get_type_hints(cls, globalns=vars(_protocol_types))
        keep: FrozenSet[str] = getattr(cls, "_KEEP_NULL", frozenset())
        plan = []
        for f in dataclasses.fields(cls):
            tp = hints[f.name]
            if tp is Messages:
                # The branch is a list on the wire; the request makes the
                # list it is given a `Messages` (with its tree).
                tp = List[Message]
            elif tp is ClientView:
                # Likewise a client's view, which the trigger makes a
                # `ClientView`.
                tp = List[DraftMessage]
            optional = get_origin(tp) is Union and _NONE in get_args(tp)
            plan.append((f.name, tp, optional, f.name in keep))
        _PLANS[cls] = plan
    return plan


def _unexpected(value: Any) -> str:
    """What serde calls a value it did not expect."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean `{'true' if value else 'false'}`"
    if isinstance(value, int):
        return f"integer `{value}`"
    if isinstance(value, float):
        return f"floating point `{value!r}`"
    if isinstance(value, str):
        return f"string {json.dumps(value, ensure_ascii=False)}"
    if isinstance(value, list):
        return "sequence"
    if isinstance(value, dict):
        return "map"
    return type(value).__name__


def _value_kind(value: Any) -> str:
    """What kind of JSON value this is, as an error message puts it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _invalid(value: Any, expected: str) -> ProtocolError:
    return ProtocolError(f"invalid type: {_unexpected(value)}, expected {expected}")


def _decode(tp: Any, value: Any) -> Any:
    if tp is Any:
        return value
    if tp is str:
        if not isinstance(value, str):
            raise _invalid(value, "a string")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise _invalid(value, "a boolean")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise _invalid(value, "u32")
        if not 0 <= value <= _U32_MAX:
            raise ProtocolError(f"invalid value: integer `{value}`, expected u32")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _invalid(value, "f64")
        return float(value)
    origin = get_origin(tp)
    if origin is Union:
        args = [a for a in get_args(tp) if a is not _NONE]
        if value is None and len(args) < len(get_args(tp)):
            return None
        if len(args) == 1:
            return _decode(args[0], value)
        if all(isinstance(a, type) and issubclass(a, _Tagged) for a in args):
            return _decode_either(args, value)
        # The one other union: Content, a string or a list of parts.
        if isinstance(value, str):
            return value
        if isinstance(value, list):
            return _decode(List[ContentPart], value)
        raise _invalid(value, "a string or an array of content parts")
    if origin is Literal:
        names = get_args(tp)
        if not isinstance(value, str):
            raise _invalid(value, "a string")
        if value not in names:
            expected = ", ".join(f"`{n}`" for n in names)
            raise ProtocolError(f"unknown variant `{value}`, expected one of {expected}")
        return value
    if origin is list:
        if not isinstance(value, list):
            raise _invalid(value, "a sequence")
        (item,) = get_args(tp)
        items: List[Any] = []
        for i, v in enumerate(value):
            try:
                items.append(_decode(item, v))
            except ProtocolError as e:
                raise e.in_index(i) from None
        return items
    if origin is dict:
        if not isinstance(value, dict):
            raise _invalid(value, "a map")
        entries: Dict[str, Any] = {}
        for k, v in value.items():
            try:
                entries[k] = _decode(str, v)
            except ProtocolError as e:
                raise e.in_field(k) from None
        return entries
    if isinstance(tp, type) and issubclass(tp, _Tagged) and tp._TAG is None:
        return _decode_tagged(tp, value)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _decode_struct(tp, value)
    raise TypeError(f"not a protocol type: {tp!r}")


def _decode_tagged(base: Type[_Tagged], value: Any) -> Any:
    tag_field = base._TAG_FIELD
    if not isinstance(value, dict):
        raise ProtocolError(f"invalid type: {_value_kind(value)}, expected an object with a `{tag_field}` field")
    if tag_field not in value:
        raise ProtocolError(f"missing field `{tag_field}`")
    tag = value[tag_field]
    if not isinstance(tag, str):
        raise ProtocolError(f"{tag_field}: invalid type: {_unexpected(tag)}, expected a string")
    variant = base._VARIANTS.get(tag)
    if variant is None:
        expected = ", ".join(f"`{t}`" for t in base._TAGS or base._VARIANTS)
        raise ProtocolError(f"{tag_field}: unknown variant `{tag}`, expected one of {expected}")
    return _decode_struct(variant, value)


def _decode_either(bases: List[Any], value: Any) -> Any:
    """A union of tagged unions (``StreamEvent``: a session event or a live
    one), read as the union whose tag ``value`` carries."""
    for base in bases:
        if isinstance(value, dict) and value.get(base._TAG_FIELD) in base._VARIANTS:
            return _decode_tagged(base, value)
    # No variant's tag: the first union's error, naming every tag.
    tags = [t for base in bases for t in (base._TAGS or base._VARIANTS)]
    tag_field = bases[0]._TAG_FIELD
    if isinstance(value, dict) and isinstance(value.get(tag_field), str):
        expected = ", ".join(f"`{t}`" for t in tags)
        raise ProtocolError(f"{tag_field}: unknown variant `{value[tag_field]}`, expected one of {expected}")
    return _decode_tagged(bases[0], value)


def _decode_struct(cls: type, value: Any) -> Any:
    if not isinstance(value, dict):
        raise _invalid(value, f"struct {cls.__name__}")
    kwargs: Dict[str, Any] = {}
    for name, tp, optional, _keep in _plan(cls):
        if name not in value:
            if optional:
                kwargs[name] = None
                continue
            raise ProtocolError(f"missing field `{name}`")
        try:
            kwargs[name] = _decode(tp, value[name])
        except ProtocolError as e:
            raise e.in_field(name) from None
    return cls(**kwargs)


def js_number(x: float) -> Union[int, float]:
    """``x`` as JavaScript writes it: a whole number within +-2**53 becomes an
    ``int`` (``3``, not ``3.0``); other values stay as they are. Non-finite
    numbers have no JSON form and raise ``ValueError``."""
    if isinstance(x, bool) or isinstance(x, int):
        return x
    if not math.isfinite(x):
        raise ValueError(f"{x} is not a JSON number")
    if x.is_integer() and abs(x) <= _MAX_SAFE_INTEGER and not (x == 0 and math.copysign(1.0, x) < 0):
        return int(x)
    return x


def jsonable(value: Any) -> Any:
    """``value`` as plain JSON values: protocol types as their JSON,
    other dataclasses as dicts, tuples (and a branch or a client's view,
    read whole) as lists; the rest as it is."""
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, Messages, ClientView)):
        return [jsonable(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        if type(value).__module__ in _PROTOCOL_MODULES:
            return to_value(value)
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    return value


def _encode(tp: Any, value: Any) -> Any:
    if value is None:
        return None
    if tp is float:
        try:
            return js_number(value)
        except ValueError as e:
            raise ProtocolError(str(e)) from None
    if tp is Any:
        return jsonable(value)
    if tp in (str, int, bool):
        return value
    origin = get_origin(tp)
    if origin is Union:
        args = [a for a in get_args(tp) if a is not _NONE]
        if len(args) == 1:
            return _encode(args[0], value)
        if isinstance(value, str):
            return value
        return _encode(List[ContentPart], value)
    if origin is Literal:
        return value
    if origin is list:
        (item,) = get_args(tp)
        out = []
        for i, v in enumerate(value):
            try:
                out.append(_encode(item, v))
            except ProtocolError as e:
                raise e.in_index(i) from None
        return out
    if origin is dict:
        return dict(value)
    return to_value(value)


def to_value(value: Any) -> Any:
    """A protocol value as its JSON, in plain Python values (dicts in the
    protocol's key order); a branch or a client's view, read whole, as a
    list."""
    if isinstance(value, (list, Messages, ClientView)):
        return [to_value(v) for v in value]
    if not dataclasses.is_dataclass(value):
        return value
    out: Dict[str, Any] = {}
    if isinstance(value, _Tagged):
        out[value._TAG_FIELD] = value._TAG
    for name, tp, _optional, keep in _plan(type(value)):
        v = getattr(value, name)
        if v is None and not keep and tp is not Any:
            continue
        try:
            out[name] = _encode(tp, v)
        except ProtocolError as e:
            raise e.in_field(name) from None
    return out


def dump_json(value: Any) -> str:
    """Plain JSON values as compact JSON text (UTF-8, no spaces, like the
    engine). Non-finite numbers raise ``ValueError``."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse_json(text: Union[str, bytes]) -> Any:
    """Parses JSON text into plain values (``NaN`` and ``Infinity`` are not
    JSON and fail)."""
    return json.loads(text, parse_constant=_no_constant)


def to_json(value: Any) -> str:
    """A protocol value as compact JSON text."""
    return dump_json(to_value(value))


_T = TypeVar("_T")


@overload
def from_json(tp: Type[_T], data: Any) -> _T: ...


@overload
def from_json(tp: Any, data: Any) -> Any: ...


def from_json(tp: Any, data: Any) -> Any:
    """Reads a protocol value of type ``tp`` (a dataclass, or a union's base
    such as :class:`Action`, or ``List[...]``) from JSON text (``str`` or
    ``bytes``) or from already parsed JSON values. Errors are
    :class:`ProtocolError`\\ s naming the field."""
    if isinstance(data, (str, bytes)):
        try:
            data = parse_json(data)
        except ValueError as e:
            raise ProtocolError(f"invalid JSON: {e}") from None
    return _decode(tp, data)


def _warm() -> None:
    for cls in list(vars(_protocol_types).values()):
        if isinstance(cls, type) and dataclasses.is_dataclass(cls) and cls.__module__ == _protocol_types.__name__:
            _plan(cls)


_warm()
