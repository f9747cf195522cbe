"""Tools an agent runs itself: declared with :func:`tool` (the type hints
give the JSON Schemas), run for ``tool.execute`` by a :class:`ToolRouter`.

::

    from typing import Annotated, TypedDict

    class Sum(TypedDict):
        sum: float

    @tool
    def add(a: Annotated[float, "The first addend"], b: float) -> Sum:
        "Adds two numbers."
        return {"sum": a + b}

    router = ToolRouter([add])
    config = AgentConfig(model="openai/gpt-4o-mini", tools=router.tools())
    action = router.execute(call)          # for a tool.execute trigger

The input schema is an object with one property per parameter (in order;
those without a default are ``required``; no others allowed), the output
schema that of the return annotation (none for ``dict``, ``Any`` or no
annotation). Types map to schemas as follows: ``float`` ``number``, ``int``
``integer``, ``str`` ``string``, ``bool`` ``boolean``, ``list[T]``
``array``, ``Optional[T]`` (``T | None``) the type or ``null``,
``Literal[...]`` an ``enum``, ``dict[str, T]`` an object, dataclasses and
``TypedDict``\\ s an object with their fields, ``Any`` anything.
``Annotated[T, "text"]`` adds a ``description``, ``Annotated[T, {...}]`` adds
the dict's keywords (``{"minimum": 0}``). Explicit ``input=``/``output=``
schemas replace the inferred ones.

The arguments are checked against the parameter types before the function
runs (the engine has already checked them against the schema): a mismatch
is a ``tool.error`` naming the field, in the words of the Rust SDK
(``invalid arguments for `add`: b: invalid type: string "2", expected f64``).
A parameter annotated :class:`~subs_sdk.protocol.ToolExecute` receives the
call itself (its ``id``, ``attempt``, ``deadline``) and is not part of the
schema.
"""

import dataclasses
import enum
import inspect
import types
import typing
from typing import Any, Callable, Dict, Generic, Iterable, List, Literal, Optional, ParamSpec, TypeVar, Union, overload

from .agent import DecideError
from .protocol import (
    Action,
    AgentTool,
    DecisionRequest,
    DecisionResponse,
    InvalidInput,
    MalformedInput,
    ProtocolError,
    ToolExecute,
    ToolHandler,
    ValidInput,
    dump_json,
    jsonable,
)

__all__ = ["Tool", "ToolRouter", "tool", "schema_of", "ArgumentError"]

_NONE = type(None)
_P = ParamSpec("_P")
_R = TypeVar("_R", covariant=True)


class ArgumentError(ProtocolError):
    """Arguments that do not fit a tool's parameters."""


# ---- schemas --------------------------------------------------------------


def _is_typeddict(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, dict) and hasattr(tp, "__total__") and hasattr(tp, "__annotations__")


def _hints(tp: Any) -> Dict[str, Any]:
    return typing.get_type_hints(tp, include_extras=True)


def _unwrap(tp: Any) -> Any:
    """``T`` of ``Annotated[T, ...]``."""
    while typing.get_origin(tp) is typing.Annotated:
        tp = typing.get_args(tp)[0]
    return tp


def _optional_of(tp: Any) -> Optional[Any]:
    """``T`` when ``tp`` is ``Optional[T]``."""
    origin = typing.get_origin(tp)
    if origin is Union or origin is types.UnionType:
        args = typing.get_args(tp)
        if _NONE in args:
            rest = [a for a in args if a is not _NONE]
            return rest[0] if len(rest) == 1 else Union[tuple(rest)]
    return None


def _object_schema(properties: Dict[str, Any], required: List[str]) -> Dict[str, Any]:
    schema: Dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    schema["additionalProperties"] = False
    return schema


def schema_of(tp: Any) -> Dict[str, Any]:
    """The JSON Schema of the type ``tp``."""
    if typing.get_origin(tp) is typing.Annotated:
        base, *extras = typing.get_args(tp)
        schema = dict(schema_of(base))
        for extra in extras:
            if isinstance(extra, str):
                schema["description"] = extra
            elif isinstance(extra, dict):
                schema.update(extra)
        return schema
    if tp is Any or tp is object:
        return {}
    if tp is bool:
        return {"type": "boolean"}
    if tp is int:
        return {"type": "integer"}
    if tp is float:
        return {"type": "number"}
    if tp is str:
        return {"type": "string"}
    if tp is _NONE or tp is None:
        return {"type": "null"}
    inner = _optional_of(tp)
    if inner is not None:
        schema = schema_of(inner)
        if isinstance(schema.get("type"), str):
            return {**schema, "type": [schema["type"], "null"]}
        return {"anyOf": [schema, {"type": "null"}]}
    origin = typing.get_origin(tp)
    if origin is Union or origin is types.UnionType:
        return {"anyOf": [schema_of(a) for a in typing.get_args(tp)]}
    if origin is Literal:
        values = list(typing.get_args(tp))
        kinds = {type(v) for v in values}
        schema = {"enum": values}
        if kinds == {str}:
            schema = {"type": "string", "enum": values}
        return schema
    if origin in (list, List, tuple) or tp in (list, tuple):
        args = typing.get_args(tp)
        schema = {"type": "array"}
        if args and origin is not tuple:
            schema["items"] = schema_of(args[0])
        return schema
    if origin is dict or tp is dict:
        args = typing.get_args(tp)
        schema = {"type": "object"}
        if len(args) == 2 and args[1] is not Any:
            schema["additionalProperties"] = schema_of(args[1])
        return schema
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return {"enum": [m.value for m in tp]}
    if _is_typeddict(tp):
        hints = _hints(tp)
        required = [k for k in hints if k in tp.__required_keys__]
        return _object_schema({k: schema_of(t) for k, t in hints.items()}, required)
    if dataclasses.is_dataclass(tp):
        hints = _hints(tp)
        fields = [f for f in dataclasses.fields(tp) if f.init]
        required = [
            f.name for f in fields if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        ]
        return _object_schema({f.name: schema_of(hints[f.name]) for f in fields}, required)
    raise TypeError(f"no JSON Schema for the type {tp!r}")


# ---- arguments --------------------------------------------------------------


def _unexpected(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean `{'true' if value else 'false'}`"
    if isinstance(value, int):
        return f"integer `{value}`"
    if isinstance(value, float):
        return f"floating point `{value!r}`"
    if isinstance(value, str):
        return "string " + dump_json(value)
    if isinstance(value, list):
        return "sequence"
    if isinstance(value, dict):
        return "map"
    return type(value).__name__


def _invalid(value: Any, expected: str) -> ArgumentError:
    return ArgumentError(f"invalid type: {_unexpected(value)}, expected {expected}")


def _fields(value: Any, hints: Dict[str, Any], required: Iterable[str], what: str) -> Dict[str, Any]:
    if not isinstance(value, dict):
        raise _invalid(value, what)
    required = set(required)
    out = {}
    for name, tp in hints.items():
        if name not in value:
            if name in required and _optional_of(_unwrap(tp)) is None:
                raise ArgumentError(f"missing field `{name}`")
            continue
        try:
            out[name] = convert(tp, value[name])
        except ArgumentError as e:
            raise ArgumentError(e.message, e.in_field(name).path) from None
    return out


def convert(tp: Any, value: Any) -> Any:
    """``value`` (JSON) as the type ``tp``, or an :class:`ArgumentError`
    naming what does not fit."""
    tp = _unwrap(tp)
    if tp is Any or tp is object:
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise _invalid(value, "a boolean")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise _invalid(value, "i64")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _invalid(value, "f64")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise _invalid(value, "a string")
        return value
    inner = _optional_of(tp)
    if inner is not None:
        return None if value is None else convert(inner, value)
    origin = typing.get_origin(tp)
    if origin is Union or origin is types.UnionType:
        for arg in typing.get_args(tp):
            try:
                return convert(arg, value)
            except ArgumentError:
                pass
        raise ArgumentError(f"data did not match any variant of {tp}")
    if origin is Literal:
        allowed = typing.get_args(tp)
        if value not in allowed or any(type(value) is not type(a) for a in allowed if a == value):
            expected = ", ".join(f"`{a}`" for a in allowed)
            raise ArgumentError(f"unknown variant {dump_json(value)}, expected one of {expected}")
        return value
    if origin in (list, tuple) or tp in (list, tuple):
        if not isinstance(value, list):
            raise _invalid(value, "a sequence")
        args = typing.get_args(tp)
        if not args or origin is tuple:
            return list(value)
        out = []
        for i, v in enumerate(value):
            try:
                out.append(convert(args[0], v))
            except ArgumentError as e:
                raise ArgumentError(e.message, e.in_index(i).path) from None
        return out
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise _invalid(value, "a map")
        args = typing.get_args(tp)
        if len(args) == 2:
            return {k: convert(args[1], v) for k, v in value.items()}
        return dict(value)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        try:
            return tp(value)
        except ValueError:
            expected = ", ".join(f"`{m.value}`" for m in tp)
            raise ArgumentError(f"unknown variant {dump_json(value)}, expected one of {expected}") from None
    if _is_typeddict(tp):
        return _fields(value, _hints(tp), tp.__required_keys__, f"struct {tp.__name__}")
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        hints = _hints(tp)
        fields = [f for f in dataclasses.fields(tp) if f.init]
        required = [
            f.name for f in fields if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        ]
        return tp(**_fields(value, {f.name: hints[f.name] for f in fields}, required, f"struct {tp.__name__}"))
    raise TypeError(f"cannot read arguments of the type {tp!r}")


# ---- tools ----------------------------------------------------------------


class Tool(Generic[_P, _R]):
    """A tool: its declaration (what the model sees) and its code.

    Made by :func:`tool`; calling it calls the function (with its
    signature: a type checker sees ``Tool[[a: float, b: float], Sum]``)."""

    def __init__(
        self,
        fn: Callable[_P, _R],
        *,
        name: Optional[str] = None,
        description: Optional[str] = None,
        input: Optional[Dict[str, Any]] = None,
        output: Optional[Dict[str, Any]] = None,
        handler: Optional[ToolHandler] = None,
    ):
        self.fn = fn
        self.name = name or fn.__name__
        hints = typing.get_type_hints(fn, include_extras=True)
        signature = inspect.signature(fn)
        self._params: Dict[str, Any] = {}
        self._required: List[str] = []
        self._call_param: Optional[str] = None
        self._rest = False  # **kwargs: gets the arguments no parameter names
        for param in signature.parameters.values():
            tp = hints.get(param.name, Any)
            if _unwrap(tp) is ToolExecute:
                self._call_param = param.name
                continue
            if param.kind is param.VAR_KEYWORD:
                self._rest = True
                continue
            if param.kind in (param.VAR_POSITIONAL, param.POSITIONAL_ONLY):
                raise TypeError(f"the tool `{self.name}` takes *args or positional-only parameters")
            self._params[param.name] = tp
            if param.default is inspect.Parameter.empty:
                self._required.append(param.name)
        if input is None:
            properties = {n: schema_of(t) for n, t in self._params.items()}
            input = _object_schema(properties, self._required)
        if output is None and "return" in hints:
            ret = hints["return"]
            if _unwrap(ret) not in (Any, dict, None, _NONE, object) and typing.get_origin(_unwrap(ret)) is not dict:
                output = schema_of(ret)
        doc = inspect.getdoc(fn)
        self.declaration = AgentTool(
            name=self.name,
            description=description if description is not None else doc,
            input=input,
            output=output,
            handler=handler,
        )
        self.__doc__ = fn.__doc__
        self.__name__ = getattr(fn, "__name__", self.name)

    def __call__(self, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        return self.fn(*args, **kwargs)

    def run(self, arguments: Any, call: ToolExecute) -> Any:
        """Runs the tool on ``arguments`` (the JSON object the model sent);
        :class:`ArgumentError` when they do not fit the parameters."""
        kwargs = _fields(arguments, self._params, self._required, "a map")
        if self._rest:
            kwargs.update((k, v) for k, v in arguments.items() if k not in self._params and k != self._call_param)
        if self._call_param is not None:
            kwargs[self._call_param] = call
        # The parameters were read from the function's own signature above.
        run: Callable[..., Any] = self.fn
        return run(**kwargs)

    def __repr__(self) -> str:
        return f"Tool({self.name!r})"


@overload
def tool(fn: Callable[_P, _R]) -> Tool[_P, _R]: ...


@overload
def tool(
    fn: None = None,
    *,
    name: Optional[str] = None,
    description: Optional[str] = None,
    input: Optional[Dict[str, Any]] = None,
    output: Optional[Dict[str, Any]] = None,
    handler: Optional[ToolHandler] = None,
) -> Callable[[Callable[_P, _R]], Tool[_P, _R]]: ...


def tool(
    fn: Optional[Callable[_P, _R]] = None,
    *,
    name: Optional[str] = None,
    description: Optional[str] = None,
    input: Optional[Dict[str, Any]] = None,
    output: Optional[Dict[str, Any]] = None,
    handler: Optional[ToolHandler] = None,
) -> Union[Tool[_P, _R], Callable[[Callable[_P, _R]], Tool[_P, _R]]]:
    """Declares a function as a tool: ``@tool`` or ``@tool(description=...)``.

    The name is the function's unless given; the description its docstring
    unless given; the schemas come from the type hints unless given."""

    def make(f: Callable[_P, _R]) -> Tool[_P, _R]:
        return Tool(f, name=name, description=description, input=input, output=output, handler=handler)

    return make(fn) if fn is not None else make


class ToolRouter:
    """The tools an agent runs itself, by name, in the order added (the
    order the model sees them in).

    :meth:`execute` settles a ``tool.execute`` call, as the Rust
    ``ToolRouter`` does:

    - ``valid`` input that fits the parameters runs the tool: its return
      value is a ``tool.result``; an exception it raises a ``tool.error``
      carrying the exception's text (a :class:`~subs_sdk.DecideError` fails
      the whole decision instead);
    - input that does not fit (the field is named), or that the engine found
      ``invalid`` or ``malformed``, is a ``tool.error`` that says what is
      wrong, without running the tool;
    - a tool the router does not know is a ``tool.error`` naming it.

    Errors are terminal: the model reads them and may call again.
    """

    def __init__(self, tools: Iterable[Union["Tool[..., Any]", Callable[..., Any]]] = ()):
        self._routes: List[Tool[..., Any]] = []
        for t in tools:
            self.add(t)

    def add(self, t: Union["Tool[..., Any]", Callable[..., Any]]) -> "ToolRouter":
        """Adds the tool ``t`` (a plain function is made one with
        :func:`tool`); a second tool of the same name is an error."""
        if not isinstance(t, Tool):
            t = Tool(t)
        if self.handles(t.name):
            raise ValueError(f"the tool `{t.name}` was added to the ToolRouter twice")
        self._routes.append(t)
        return self

    @overload
    def tool(self, fn: Callable[_P, _R]) -> Tool[_P, _R]: ...

    @overload
    def tool(
        self,
        fn: None = None,
        *,
        name: Optional[str] = None,
        description: Optional[str] = None,
        input: Optional[Dict[str, Any]] = None,
        output: Optional[Dict[str, Any]] = None,
        handler: Optional[ToolHandler] = None,
    ) -> Callable[[Callable[_P, _R]], Tool[_P, _R]]: ...

    def tool(
        self,
        fn: Optional[Callable[_P, _R]] = None,
        *,
        name: Optional[str] = None,
        description: Optional[str] = None,
        input: Optional[Dict[str, Any]] = None,
        output: Optional[Dict[str, Any]] = None,
        handler: Optional[ToolHandler] = None,
    ) -> Union[Tool[_P, _R], Callable[[Callable[_P, _R]], Tool[_P, _R]]]:
        """:func:`tool` that also adds the tool to this router."""

        def make(f: Callable[_P, _R]) -> Tool[_P, _R]:
            t = Tool(f, name=name, description=description, input=input, output=output, handler=handler)
            self.add(t)
            return t

        return make(fn) if fn is not None else make

    def tools(self) -> List[AgentTool]:
        """The declarations of all tools, in order: what the agent puts in
        its config."""
        return [dataclasses.replace(t.declaration) for t in self._routes]

    def get(self, name: str) -> Optional[AgentTool]:
        """The declaration of the tool named ``name``."""
        t = self._find(name)
        return None if t is None else t.declaration

    def handles(self, name: str) -> bool:
        """Whether the router runs a tool named ``name``."""
        return self._find(name) is not None

    def execute(self, call: ToolExecute) -> Action:
        """The ``tool.result`` or ``tool.error`` that settles ``call``. The
        action leaves ``id`` and ``attempt`` out: the engine takes them from
        the ``tool.execute`` being answered."""
        t = self._find(call.name)
        if t is None:
            return Action.tool_error(self._unknown(call.name))
        if isinstance(call.input, InvalidInput):
            return Action.tool_error(f"invalid arguments for `{call.name}`: {call.input.error}")
        if isinstance(call.input, MalformedInput):
            return Action.tool_error(f"malformed arguments for `{call.name}`: {call.input.error}")
        if not isinstance(call.input, ValidInput):  # the union has no other members
            raise TypeError(f"not a tool input: {call.input!r}")
        try:
            result = t.run(call.input.value, call)
        except ArgumentError as e:
            return Action.tool_error(f"invalid arguments for `{call.name}`: {e}")
        except DecideError:
            raise
        except Exception as e:  # the tool failed: the model reads why
            return Action.tool_error(str(e) or type(e).__name__)
        result = jsonable(result)
        try:
            dump_json(result)
        except (TypeError, ValueError) as e:
            return Action.tool_error(f"the result of `{call.name}` is not JSON: {e}")
        return Action.tool_result(result)

    def decide(self, request: DecisionRequest) -> Optional[DecisionResponse]:
        """For a ``tool.execute`` trigger, ``proposed`` with the settling
        action added; ``None`` for every other trigger."""
        if not isinstance(request.trigger, ToolExecute):
            return None
        return request.proposed.with_action(self.execute(request.trigger))

    def _find(self, name: str) -> "Optional[Tool[..., Any]]":
        return next((t for t in self._routes if t.name == name), None)

    def _unknown(self, name: str) -> str:
        if not self._routes:
            return f"unknown tool `{name}`: this agent runs no tools"
        known = ", ".join(f"`{t.name}`" for t in self._routes)
        return f"unknown tool `{name}`: this agent runs {known}"

    def __repr__(self) -> str:
        return f"ToolRouter(tools={[t.name for t in self._routes]!r})"
