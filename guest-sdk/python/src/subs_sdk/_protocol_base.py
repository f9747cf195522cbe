"""What the generated protocol types (``_protocol_types.py``) build on:
:class:`ProtocolError`, the base of tagged unions, and the methods a few
types carry, as mixins the generator names (``xtask/src/python.rs``).

The mixins declare the fields their methods read, for the type checker;
the dataclasses that take them define those fields."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Dict, Iterable, List, Optional, Tuple

if TYPE_CHECKING:
    from typing import Self

    from ._protocol_types import (
        AgentTool,
        Call,
        Content,
        DraftMessage,
        Interrupt,
        LlmCall,
        LlmError,
        LlmFormat,
        LlmRequest,
        LlmResult,
        MessageSend,
        SubAgentSpawn,
        Done,
        ToolCall,
        ToolCallAction,
        ToolError,
        ToolResult,
        AgentConfig,
        Action,
        DecisionRequest,
        Trigger,
    )


class ProtocolError(ValueError):
    """A value that is not what the protocol says; ``path`` names the field
    (``actions[0].arguments``), ``message`` says what is wrong."""

    def __init__(self, message: str, path: str = ""):
        super().__init__(message, path)
        self.message = message
        self.path = path

    def in_field(self, name: str) -> "ProtocolError":
        """The same error, one field further out."""
        if not name:
            return self
        return ProtocolError(self.message, _join(name, self.path))

    def in_index(self, index: int) -> "ProtocolError":
        """The same error, inside item ``index`` of a list."""
        return ProtocolError(self.message, _join(f"[{index}]", self.path))

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


def _join(outer: str, inner: str) -> str:
    if not inner:
        return outer
    if inner.startswith("["):
        return outer + inner
    return f"{outer}.{inner}"


class _Tagged:
    """A member of a union tagged by a field: subclasses set ``_TAG``."""

    _TAG_FIELD: ClassVar[str] = "type"
    _TAG: ClassVar[Optional[str]] = None
    _TAGS: ClassVar[Tuple[str, ...]] = ()
    _VARIANTS: ClassVar[Dict[str, type]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "_VARIANTS" not in cls.__dict__ and cls.__dict__.get("_TAG") is None and _Tagged in cls.__bases__:
            cls._VARIANTS = {}  # a union's base
        tag = cls.__dict__.get("_TAG")
        if tag is not None:
            cls._VARIANTS[tag] = cls

    @property
    def kind(self) -> str:
        """The tag (``tool.execute``), for logs and dispatch."""
        assert self._TAG is not None
        return self._TAG


def _content_text(content: Optional[Content]) -> str:
    from ._protocol_types import TextPart

    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "\n".join(p.text for p in content if isinstance(p, TextPart))


class _MessageMethods:
    content: Optional[Content]

    def text(self) -> str:
        """The text of the content (text parts joined by newlines)."""
        return _content_text(self.content)


class _DraftMessageMethods:
    id: Optional[str]
    content: Optional[Content]

    @staticmethod
    def user(text: str) -> DraftMessage:
        from ._protocol_types import DraftMessage

        return DraftMessage(role="user", content=text)

    @staticmethod
    def assistant(text: str) -> DraftMessage:
        from ._protocol_types import DraftMessage

        return DraftMessage(role="assistant", content=text)

    @staticmethod
    def system(text: str) -> DraftMessage:
        from ._protocol_types import DraftMessage

        return DraftMessage(role="system", content=text)

    @staticmethod
    def tool(tool_call_id: str, text: str) -> DraftMessage:
        """The answer to the tool call ``tool_call_id``."""
        from ._protocol_types import DraftMessage

        return DraftMessage(role="tool", content=text, tool_call_id=tool_call_id)

    def with_id(self, id: str) -> Self:
        self.id = id
        return self

    def text(self) -> str:
        return _content_text(self.content)


class _ToolCallMethods:
    @staticmethod
    def of(id: str, name: str, arguments: str) -> ToolCall:
        """A ``function`` tool call."""
        from ._protocol_types import FunctionCall, ToolCall

        return ToolCall(id=id, function=FunctionCall(name=name, arguments=arguments))


class _AgentConfigMethods:
    tools: Optional[List[AgentTool]]

    def tool(self, name: str) -> Optional[AgentTool]:
        """The tool named ``name``."""
        return next((t for t in self.tools or [] if t.name == name), None)


class _LlmExecuteMethods:
    format: Optional[LlmFormat]
    request: Any

    def llm_request(self) -> LlmRequest:
        """The request as an :class:`LlmRequest`; fails for a provider-native
        one."""
        from ._protocol_types import LlmRequest
        from .protocol import from_json

        if self.format is not None:
            raise ProtocolError(f"the request is in the provider-native {self.format} format", "request")
        try:
            return from_json(LlmRequest, self.request)
        except ProtocolError as e:
            raise e.in_field("request") from None


#: The payload key naming the tool of an approval request.
APPROVAL_TOOL = "tool"
#: The payload key holding the call id of an approval request.
APPROVAL_CALL_ID = "call_id"
#: The payload key holding the arguments of an approval request.
APPROVAL_ARGUMENTS = "arguments"


class _ActionMethods:
    """The common actions (the names of the Rust ``Action`` constructors)."""

    @staticmethod
    def llm_call(**fields: Any) -> LlmCall:
        """``llm.call``; omitted fields come from the agent config."""
        from ._protocol_types import LlmCall

        return LlmCall(**fields)

    @staticmethod
    def tool_call(name: str, arguments: Any, **fields: Any) -> ToolCallAction:
        """``tool.call`` of ``name`` with ``arguments``."""
        from ._protocol_types import ToolCallAction

        return ToolCallAction(name=name, arguments=arguments, **fields)

    @staticmethod
    def tool_result(result: Any) -> ToolResult:
        """``tool.result`` settling the call of the ``tool.execute`` answered."""
        from ._protocol_types import ToolResult
        from .protocol import jsonable

        return ToolResult(result=jsonable(result))

    @staticmethod
    def tool_error(error: str, **fields: Any) -> ToolError:
        """``tool.error`` (terminal unless ``retryable=True``) settling the call
        of the ``tool.execute`` answered."""
        from ._protocol_types import ToolError

        return ToolError(error=error, **fields)

    @staticmethod
    def llm_result(response: Any) -> LlmResult:
        """``llm.result`` settling the call of the ``llm.execute`` answered;
        ``response`` is an :class:`LlmResponse` or provider-native JSON."""
        from ._protocol_types import LlmResult
        from .protocol import jsonable

        return LlmResult(response=jsonable(response))

    @staticmethod
    def llm_error(error: str, **fields: Any) -> LlmError:
        """``llm.error`` settling the call of the ``llm.execute`` answered."""
        from ._protocol_types import LlmError

        return LlmError(error=error, **fields)

    @staticmethod
    def interrupt(reason: str, payload: Any = None, interrupt_id: Optional[str] = None) -> Interrupt:
        """``interrupt``; the engine mints the id when it is omitted."""
        from ._protocol_types import Interrupt
        from .protocol import jsonable

        return Interrupt(interrupt_id=interrupt_id, reason=reason, payload=jsonable(payload))

    @staticmethod
    def done(data: Any = None) -> Done:
        """``done``, with ``data`` for clients when given."""
        from ._protocol_types import Done
        from .protocol import jsonable

        return Done(data=jsonable(data))

    @staticmethod
    def done_with(data: Any) -> Done:
        """``done`` carrying ``data``."""
        from ._protocol_types import Done
        from .protocol import jsonable

        return Done(data=jsonable(data))

    @staticmethod
    def sub_agent_spawn(session_id: str, agent_id: str, tool_call_id: str, **fields: Any) -> SubAgentSpawn:
        """``sub_agent.spawn``."""
        from ._protocol_types import SubAgentSpawn

        return SubAgentSpawn(session_id=session_id, agent_id=agent_id, tool_call_id=tool_call_id, **fields)

    @staticmethod
    def message_send(session_id: str, message: DraftMessage) -> MessageSend:
        """``message.send``."""
        from ._protocol_types import MessageSend

        return MessageSend(session_id=session_id, message=message)

    @staticmethod
    def spawn(session_id: str, agent_id: str, tool_call_id: str) -> SubAgentSpawn:
        """``sub_agent.spawn`` of ``agent_id`` as the child session
        ``session_id``, answering the assistant tool call ``tool_call_id``,
        whose arguments become the child's first message."""
        from ._protocol_types import SubAgentSpawn

        return SubAgentSpawn(session_id=session_id, agent_id=agent_id, tool_call_id=tool_call_id)

    @staticmethod
    def approval(call_id: str, tool: str, arguments: Any) -> Interrupt:
        """The ``interrupt`` asking a person to approve the tool call
        ``call_id`` of ``tool`` with ``arguments``: its id is the call id, its
        payload ``{"tool", "call_id", "arguments"}``, its ``resume_schema``
        :func:`approval_answer_schema` (the resume payload is
        ``{"approved": bool, "reason"?: str}``). A
        :class:`~subs_sdk.ToolRouter` opens and answers these for the tools
        it gates."""
        from ._protocol_types import Interrupt
        from .protocol import approval_answer_schema, jsonable

        payload = {APPROVAL_TOOL: tool, APPROVAL_CALL_ID: call_id, APPROVAL_ARGUMENTS: jsonable(arguments)}
        return Interrupt(
            interrupt_id=call_id, reason=f"approve {tool}", payload=payload, resume_schema=approval_answer_schema()
        )


class _DecisionResponseMethods:
    """The ``with_*`` methods add to a decision and return it, for
    chaining."""

    messages: Optional[List[DraftMessage]]
    actions: Optional[List[Action]]
    state: Optional[Any]
    agent: Optional[AgentConfig]

    def with_message(self, message: DraftMessage) -> Self:
        if self.messages is None:
            self.messages = []
        self.messages.append(message)
        return self

    def with_action(self, action: Action) -> Self:
        if self.actions is None:
            self.actions = []
        self.actions.append(action)
        return self

    def with_state(self, state: Any) -> Self:
        from .protocol import jsonable

        self.state = jsonable(state)
        return self

    def with_agent(self, agent: AgentConfig) -> Self:
        self.agent = agent
        return self

    def is_empty(self) -> bool:
        return not self.messages and not self.actions and self.state is None and self.agent is None

    def replace_actions(self, actions: Iterable[Action]) -> Self:
        """The same decision with ``actions`` instead of its own: keep what a
        proposal records (messages, state, config) and decide something
        else."""
        listed = list(actions)
        self.actions = listed or None
        return self

    def delegate(self, request: DecisionRequest, agent_id: str, input: str) -> Self:
        """Adds a delegation to the sub-agent ``agent_id`` with ``input`` as
        the child's first message: an assistant message calling ``agent_id``
        (the call's arguments are ``input``, verbatim) and the
        ``sub_agent.spawn`` answering it, recorded together. The child's
        reply comes back as that call's ``tool`` message
        (``sub_agent.finished``).

        ``agent_id`` must be a sub-agent of the config the decision runs
        under; the engine refuses the decision otherwise. The call and child
        ids derive from the request's decision, so a redelivered request
        delegates under the same ids."""
        from ._protocol_types import Action, DraftMessage, SubAgentSpawn, ToolCall
        from .protocol import _bounded_id

        n = sum(1 for a in self.actions or [] if isinstance(a, SubAgentSpawn)) + 1
        call_id = _bounded_id(f"delegate.{request.decision_id}.{n}")
        session_id = _bounded_id(f"{request.session_id}.{call_id}")
        message = DraftMessage(role="assistant", tool_calls=[ToolCall.of(call_id, agent_id, input)])
        return self.with_message(message).with_action(Action.spawn(session_id, agent_id, call_id))


class _ClientMessagesMethods:
    """A ``client.messages`` trigger's view is a :class:`ClientView`
    however the trigger was made."""

    def __post_init__(self) -> None:
        # From JSON or in a test the view comes as a list: held, so that
        # agent code reads it as it reads a component's (`is_read` too).
        from .branch import ClientView

        messages = self.__dict__.get("messages")
        if not isinstance(messages, ClientView):
            self.__dict__["messages"] = ClientView(messages or [])


class _DecisionRequestMethods:
    """The defaults make a minimal request (a new session, first delivery)
    for tests: ``DecisionRequest(trigger=SessionStart())``."""

    session_id: str
    decision_id: str
    calls: List[Call]

    def __post_init__(self) -> None:
        # The branch is a `Messages` whichever way the request was made
        # (from JSON, in a test), so that agent code reads it the same way
        # as in a component, where it is read on demand.
        from .branch import Messages

        messages = self.__dict__.get("messages")
        if not isinstance(messages, Messages):
            self.__dict__["messages"] = Messages(messages or [], self.__dict__.get("message_tree"))

    if not TYPE_CHECKING:

        def __getattr__(self, name: str) -> Any:
            # A request whose branch is read on demand has no `message_tree`
            # until it is asked for: then it is the branch's tree.
            if name == "message_tree" and "messages" in self.__dict__:
                tree = self.__dict__["message_tree"] = self.__dict__["messages"].tree
                return tree
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @staticmethod
    def for_trigger(trigger: Trigger) -> DecisionRequest:
        """A minimal request for ``trigger``, as in the Rust SDK."""
        from ._protocol_types import DecisionRequest

        return DecisionRequest(trigger=trigger)

    def call(self, id: str) -> Optional[Call]:
        """The in-flight call with this id."""
        return next((c for c in self.calls if c.id == id), None)
