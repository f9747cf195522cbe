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
call itself (its ``id``, ``attempt``, ``deadline``), one annotated
``ToolContext[S]`` a :class:`ToolContext` (the session state typed as ``S``,
read and write; the call id; the identity; a logger); neither is part of the
schema.

``@tool(needs_approval=True)`` (or a function of the arguments) gates a tool
behind a person's approval: :meth:`ToolRouter.handle` answers the model's
call with the call and an approval ``interrupt``, runs the tool only once
it is approved, and settles a denied call with a ``tool.error`` the model
reads. :meth:`ToolRouter.sub_agent` offers another agent to the model as a
tool.
"""

import copy
import dataclasses
import enum
import inspect
import types
import typing
from typing import Any, Callable, Dict, Generic, Iterable, List, Literal, Optional, ParamSpec, TypeVar, Union, overload

from .agent import Context, DecideError, Host, Level
from .protocol import (
    Action,
    AgentConfig,
    AgentTool,
    CallKind,
    CallStatus,
    Interrupt,
    InterruptResumed,
    SubAgent,
    ToolCallAction,
    ToolError,
    WorkerIdentity,
    Call,
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

__all__ = ["Tool", "ToolContext", "ToolRouter", "tool", "schema_of", "ArgumentError", "APPROVALS_STATE_KEY"]

_NONE = type(None)
_P = ParamSpec("_P")
_R = TypeVar("_R", covariant=True)
_S = TypeVar("_S")

#: The key of the agent state under which a :class:`ToolRouter` keeps the
#: answers to its approvals until the calls' ``tool.execute``: call id to
#: ``True`` (approved) or the reason of a denial.
APPROVALS_STATE_KEY = "subs_approvals"

#: Decides per call, from its arguments, whether a call needs approval.
ApprovalGate = Callable[[Any], bool]


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


# ---- tool context -------------------------------------------------------------


class _NoHost(Host):
    """The host of calls run without one (:meth:`ToolRouter.execute`): log
    lines have nowhere to go."""

    def log(self, level: Level, message: str) -> None:
        pass

    def emit_delta(self, delta: Any) -> Optional[str]:
        return "deltas are only accepted while answering an llm.execute trigger with stream: true"


class ToolContext(Generic[_S]):
    """What a tool sees of its session, given to the parameter annotated
    ``ToolContext[S]`` (which is not part of the schema): the call, the
    session's owner, the agent state typed as ``S`` (read and write) and the
    engine's logs.

    ``S`` is a dataclass (started from its defaults while the state is
    ``null``), a ``TypedDict`` or ``dict`` (started empty), or ``Any``. What
    the tool leaves in :attr:`state` becomes the session's state when it
    changed, whether the tool succeeds or fails."""

    def __init__(self, state: _S, call: ToolExecute, request: Optional[DecisionRequest], host: Host):
        #: The agent state, typed; changes are stored with the decision.
        self.state = state
        self.call = call
        self.request = request
        self._cx = Context(host)

    @property
    def call_id(self) -> str:
        """The call's id: the same on every execution of one call, for
        idempotency."""
        return self.call.id

    @property
    def identity(self) -> WorkerIdentity:
        """The session's owner (its ``id`` and labels); empty when the call
        runs without its request (:meth:`ToolRouter.execute`)."""
        return self.request.identity if self.request is not None else WorkerIdentity()

    def log(self, level: Union[Level, str], message: str) -> None:
        """Writes a line to the engine's logs at ``level``."""
        self._cx.log(level, message)

    def info(self, message: str) -> None:
        self._cx.info(message)

    def warn(self, message: str) -> None:
        self._cx.warn(message)

    def error(self, message: str) -> None:
        self._cx.error(message)

    def __repr__(self) -> str:
        return f"ToolContext(state={self.state!r}, call_id={self.call.id!r})"


def _read_state(tp: Any, value: Any) -> Any:
    """The session state ``value`` as the state type ``tp``."""
    base = _unwrap(tp)
    if value is None:
        if isinstance(base, type) and dataclasses.is_dataclass(base):
            return base()
        if base is dict or _is_typeddict(base) or typing.get_origin(base) is dict:
            return {}
        return None
    return convert(tp, value)


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
        needs_approval: Union[bool, ApprovalGate] = False,
    ):
        self.fn = fn
        #: Whether a call needs a person's approval: always, never, or as a
        #: function of the call's arguments decides.
        self.needs_approval = needs_approval
        self.name = name or fn.__name__
        hints = typing.get_type_hints(fn, include_extras=True)
        signature = inspect.signature(fn)
        self._params: Dict[str, Any] = {}
        self._required: List[str] = []
        self._call_param: Optional[str] = None
        self._context_param: Optional[str] = None
        self._state_type: Any = Any
        self._rest = False  # **kwargs: gets the arguments no parameter names
        for param in signature.parameters.values():
            tp = hints.get(param.name, Any)
            if _unwrap(tp) is ToolExecute:
                self._call_param = param.name
                continue
            if _unwrap(tp) is ToolContext or typing.get_origin(_unwrap(tp)) is ToolContext:
                self._context_param = param.name
                self._state_type = (typing.get_args(_unwrap(tp)) or (Any,))[0]
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

    def run(self, arguments: Any, call: ToolExecute, context: "Optional[ToolContext[Any]]" = None) -> Any:
        """Runs the tool on ``arguments`` (the JSON object the model sent);
        :class:`ArgumentError` when they do not fit the parameters. A tool
        that takes a :class:`ToolContext` gets ``context`` (one with a
        ``null`` state and no host when not given)."""
        kwargs = _fields(arguments, self._params, self._required, "a map")
        if self._rest:
            skip = {self._call_param, self._context_param}
            kwargs.update((k, v) for k, v in arguments.items() if k not in self._params and k not in skip)
        if self._call_param is not None:
            kwargs[self._call_param] = call
        if self._context_param is not None:
            if context is None:
                context = ToolContext(_read_state(self._state_type, None), call, None, _NoHost())
            kwargs[self._context_param] = context
        # The parameters were read from the function's own signature above.
        run: Callable[..., Any] = self.fn
        return run(**kwargs)

    def gated(self, arguments: Any) -> bool:
        """Whether a call with ``arguments`` needs approval."""
        if callable(self.needs_approval):
            try:
                return bool(self.needs_approval(arguments))
            except Exception:  # a gate that cannot judge the call asks: approval fails closed
                return True
        return bool(self.needs_approval)

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
    needs_approval: Union[bool, ApprovalGate] = False,
) -> Callable[[Callable[_P, _R]], Tool[_P, _R]]: ...


def tool(
    fn: Optional[Callable[_P, _R]] = None,
    *,
    name: Optional[str] = None,
    description: Optional[str] = None,
    input: Optional[Dict[str, Any]] = None,
    output: Optional[Dict[str, Any]] = None,
    handler: Optional[ToolHandler] = None,
    needs_approval: Union[bool, ApprovalGate] = False,
) -> Union[Tool[_P, _R], Callable[[Callable[_P, _R]], Tool[_P, _R]]]:
    """Declares a function as a tool: ``@tool`` or ``@tool(description=...)``.

    The name is the function's unless given; the description its docstring
    unless given; the schemas come from the type hints unless given.
    ``needs_approval=True`` (or a function of the call's arguments returning
    whether this call needs it) makes :meth:`ToolRouter.handle` ask a person
    before the tool runs."""

    def make(f: Callable[_P, _R]) -> Tool[_P, _R]:
        return Tool(
            f,
            name=name,
            description=description,
            input=input,
            output=output,
            handler=handler,
            needs_approval=needs_approval,
        )

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
        self._sub_agents: List[SubAgent] = []
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
        needs_approval: Union[bool, ApprovalGate] = False,
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
        needs_approval: Union[bool, ApprovalGate] = False,
    ) -> Union[Tool[_P, _R], Callable[[Callable[_P, _R]], Tool[_P, _R]]]:
        """:func:`tool` that also adds the tool to this router."""

        def make(f: Callable[_P, _R]) -> Tool[_P, _R]:
            t = Tool(
            f,
            name=name,
            description=description,
            input=input,
            output=output,
            handler=handler,
            needs_approval=needs_approval,
        )
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

    def sub_agent(self, id: str, description: str) -> "ToolRouter":
        """Adds the agent ``id`` as a tool the model may call (described to it
        by ``description``): the engine runs a call of it as a child session
        of that agent, and the child's reply is the call's result. The agent
        must be registered with the engine under ``id``."""
        self._sub_agents.append(SubAgent(id=id, description=description))
        return self

    def sub_agents(self) -> List[SubAgent]:
        """The sub-agents the model may call, in the order added."""
        return list(self._sub_agents)

    def configure(self, config: AgentConfig) -> AgentConfig:
        """``config`` with the router's tools and sub-agents added."""
        config.tools = [*(config.tools or []), *self.tools()]
        if self._sub_agents:
            config.sub_agents = [*(config.sub_agents or []), *self.sub_agents()]
        return config

    def needs_approval_for(self, name: str, arguments: Any) -> bool:
        """Whether a call of ``name`` with ``arguments`` needs approval."""
        t = self._find(name)
        return t is not None and t.gated(arguments)

    def execute(self, call: ToolExecute) -> Action:
        """The ``tool.result`` or ``tool.error`` that settles ``call``. The
        action leaves ``id`` and ``attempt`` out: the engine takes them from
        the ``tool.execute`` being answered. Run this way, a tool's
        :class:`ToolContext` has a ``null`` state (its changes are dropped),
        no identity, and its log lines go nowhere; :meth:`handle` runs it
        with its session's."""
        action, _ = self._run(call, None, None, _NoHost())
        return action

    def _run(self, call: ToolExecute, request: Optional[DecisionRequest], state: Any, host: Host) -> "tuple[Action, Any]":
        """Runs ``call`` with the session ``state``: the settling action and
        the state the tool left."""
        t = self._find(call.name)
        if t is None:
            return Action.tool_error(self._unknown(call.name)), state
        if isinstance(call.input, InvalidInput):
            return Action.tool_error(f"invalid arguments for `{call.name}`: {call.input.error}"), state
        if isinstance(call.input, MalformedInput):
            return Action.tool_error(f"malformed arguments for `{call.name}`: {call.input.error}"), state
        if not isinstance(call.input, ValidInput):  # the union has no other members
            raise TypeError(f"not a tool input: {call.input!r}")
        context: Optional[ToolContext[Any]] = None
        if t._context_param is not None:
            try:
                typed = _read_state(t._state_type, state)
            except ArgumentError as e:
                error = e.in_field("state")
                return Action.tool_error(f"the session state does not fit the state of `{call.name}`: {error}"), state
            context = ToolContext(typed, call, request, host)
        try:
            try:
                result = t.run(call.input.value, call, context)
            finally:
                if context is not None:
                    state = jsonable(context.state)
        except ArgumentError as e:
            return Action.tool_error(f"invalid arguments for `{call.name}`: {e}"), state
        except DecideError:
            raise
        except Exception as e:  # the tool failed: the model reads why
            return Action.tool_error(str(e) or type(e).__name__), state
        result = jsonable(result)
        try:
            dump_json(result)
        except (TypeError, ValueError) as e:
            return Action.tool_error(f"the result of `{call.name}` is not JSON: {e}"), state
        return Action.tool_result(result), state

    def decide(self, request: DecisionRequest) -> Optional[DecisionResponse]:
        """For a ``tool.execute`` trigger, ``proposed`` with the settling
        action added (and the state its tool left); ``None`` for every other
        trigger."""
        if not isinstance(request.trigger, ToolExecute):
            return None
        return self.handle(request, Context(_NoHost()))

    def handle(self, request: DecisionRequest, cx: Context) -> DecisionResponse:
        """The decision for ``request``, taking the engine's proposal for all
        that is not the router's:

        - ``tool.execute``: the call run with the session's state, identity
          and logs, and the state its tool left; a call of a gated tool runs
          only on a recorded approval, else it is settled with a
          ``tool.error`` (``denied by the approver: <reason>``) unrun;
        - ``interrupt.resumed`` of an approval this router asked for: nothing
          when approved (the call starts), else a ``tool.error`` settling the
          call with the reason;
        - any other: ``proposed``, with an approval asked for each call of a
          gated tool in it (see :meth:`gate`).

        Each gated call of one reply gets its own interrupt, answered on its
        own. The engine holds every call of the reply until the last of them
        is answered and refuses to settle a call it still holds, so the
        answers wait in the state under :data:`APPROVALS_STATE_KEY` until
        the call's ``tool.execute`` reads its own."""
        trigger = request.trigger
        if isinstance(trigger, ToolExecute):
            state, answers = _split(request.state)
            if self.needs_approval_for(trigger.name, _execute_arguments(trigger)):
                answer = answers.pop(trigger.id, None)
                if answer is True:
                    action, state = self._run(trigger, request, state, cx.host)
                elif isinstance(answer, str):
                    action = Action.tool_error(_denial(answer))
                else:
                    action = Action.tool_error(_denial("no approval of this call was recorded"))
            else:
                action, state = self._run(trigger, request, state, cx.host)
            state = _put_answers(state, answers)
            if state is None and request.state is not None:
                state = {}
            decision = _copy_decision(request.proposed).with_action(action)
            return decision if state == request.state else decision.with_state(state)
        if isinstance(trigger, InterruptResumed):
            found = self._answer(request, trigger)
            if found is None:
                return request.proposed
            call, approved, reason = found
            id = trigger.interrupt_id
            tool = call.name or ""
            state, answers = _split(request.state)
            decision = _copy_decision(request.proposed)
            if approved:
                cx.info(f"the call `{id}` of `{tool}` was approved")
                answers[id] = True
            else:
                cx.info(f"the call `{id}` of `{tool}` was denied: {reason}")
                if call.status == "queued":
                    # Still held behind another open approval: the engine
                    # refuses to settle it before it starts, so the denial
                    # waits in the state for its `tool.execute`.
                    answers[id] = reason
                else:
                    decision.with_action(ToolError(id=id, error=_denial(reason)))
            state = _put_answers(state, answers)
            if state is None and request.state is not None:
                state = {}
            return decision if state == request.state else decision.with_state(state)
        return self.gate(request, request.proposed)

    def gate(self, request: DecisionRequest, decision: DecisionResponse) -> DecisionResponse:
        """``decision`` with an approval ``interrupt`` after each ``tool.call``
        of a tool that needs one. A call without an id gets one (derived from
        the request's decision), since the approval names it. An agent that
        builds its own decisions passes them through this to keep its
        gates."""
        actions = decision.actions or []
        if not any(isinstance(a, ToolCallAction) and self.needs_approval_for(a.name, a.arguments) for a in actions):
            return decision
        asked = {a.interrupt_id for a in actions if isinstance(a, Interrupt) and a.interrupt_id is not None}
        gated: List[Action] = []
        for i, action in enumerate(actions):
            gated.append(action)
            if isinstance(action, ToolCallAction) and self.needs_approval_for(action.name, action.arguments):
                if action.id is None:
                    action.id = f"approve.{request.decision_id}.{i}"
                if action.id not in asked:
                    gated.append(Action.approval(action.id, action.name, action.arguments))
        decision.actions = gated
        return decision

    def _answer(self, request: DecisionRequest, resumed: InterruptResumed) -> "Optional[tuple[Call, bool, str]]":
        """The call the approval ``resumed`` answers, whether it was
        approved, and the reason of a denial; ``None`` when it is not an
        approval of an open call of a tool this router gates."""
        call = request.call(resumed.interrupt_id)
        if call is None or call.kind != "tool_call" or call.status in ("completed", "failed") or call.name is None:
            return None
        t = self._find(call.name)
        if t is None or t.needs_approval is False:
            return None
        not_an_answer = 'the answer was not {"approved": true|false}'
        # Anything but an explicit `"approved": true` denies: an approval
        # fails closed.
        payload = resumed.payload
        if not isinstance(payload, dict):
            return call, False, not_an_answer
        approved = payload.get("approved")
        if approved is True:
            return call, True, ""
        if approved is False:
            reason = payload.get("reason")
            return call, False, reason if isinstance(reason, str) else ""
        return call, False, not_an_answer

    def _find(self, name: str) -> "Optional[Tool[..., Any]]":
        return next((t for t in self._routes if t.name == name), None)

    def _unknown(self, name: str) -> str:
        if not self._routes:
            return f"unknown tool `{name}`: this agent runs no tools"
        known = ", ".join(f"`{t.name}`" for t in self._routes)
        return f"unknown tool `{name}`: this agent runs {known}"

    def __repr__(self) -> str:
        return f"ToolRouter(tools={[t.name for t in self._routes]!r})"


# ---- approvals ----------------------------------------------------------------


def _copy(value: Any) -> Any:
    """A deep copy of JSON ``value``."""
    return copy.deepcopy(value)


def _copy_decision(decision: DecisionResponse) -> DecisionResponse:
    return copy.deepcopy(decision)


def _split(state: Any) -> "tuple[Any, Dict[str, Any]]":
    """A copy of ``state`` without the approval answers, and the answers, so
    that tools see the state without them. The answers alone made a
    ``null`` state an object: it is ``null`` again, and a typed state starts
    from its default."""
    state = _copy(state)
    if not isinstance(state, dict) or APPROVALS_STATE_KEY not in state:
        return state, {}
    answers = state.pop(APPROVALS_STATE_KEY)
    if not state:
        state = None
    return state, answers if isinstance(answers, dict) else {}


def _put_answers(state: Any, answers: Dict[str, Any]) -> Any:
    """``state`` with the approval ``answers`` back in; none when there are
    none left. A state that is neither an object nor null cannot hold them
    (the call's ``tool.execute`` then finds none and denies)."""
    if not answers:
        return state
    if state is None:
        state = {}
    if isinstance(state, dict):
        state[APPROVALS_STATE_KEY] = answers
    return state


def _execute_arguments(call: ToolExecute) -> Any:
    """The arguments of a ``tool.execute`` as its ``tool.call`` had them: the
    parsed value, or the raw text when it did not parse."""
    if isinstance(call.input, (ValidInput, InvalidInput)):
        return call.input.value
    return call.arguments


def _denial(reason: str) -> str:
    """The error a denied call is settled with: what the model reads."""
    return f"denied by the approver: {reason}" if reason else "denied by the approver"
