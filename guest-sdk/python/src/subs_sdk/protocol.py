"""The decision protocol's types, and their JSON.

One dataclass per type of the wire reference (`docs/protocol.md`), with the
same field names and the same field order as the JSON (and as the Rust
`subs-protocol` crate). Optional fields default to ``None`` and are omitted
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
from dataclasses import dataclass, field
from typing import (
    Any,
    ClassVar,
    Dict,
    FrozenSet,
    Iterable,
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

__all__ = [
    "ProtocolError", "from_json", "to_json", "to_value", "js_number", "jsonable", "parse_json", "dump_json",
    "Role", "Handler", "LlmHandler", "ToolHandler", "LlmFormat", "ReasoningEffort", "ErrorCode", "CallKind",
    "CallStatus",
    "UrlRef", "FileData", "AudioData", "ContentPart", "TextPart", "ImageUrlPart", "FilePart", "InputAudioPart",
    "VideoUrlPart", "Content", "FunctionCall", "ToolCall", "Message", "DraftMessage", "TreeNode", "MessageTree",
    "RetryPolicy", "AgentTool", "SubAgent", "AgentConfig",
    "LlmTool", "ReasoningConfig", "LlmRequest", "LlmResponse", "ToolCallDelta", "StreamDelta",
    "ToolInput", "ValidInput", "InvalidInput", "MalformedInput", "ClientContext",
    "Trigger", "SessionStart", "ClientMessages", "ClientAction", "ToolExecute", "ToolFinished", "LlmExecute",
    "LlmFinished", "SubAgentFinished", "InterruptResumed",
    "Action", "LlmCall", "ToolCallAction", "ToolResult", "CallError", "ToolError", "LlmError", "LlmResult",
    "SubAgentSpawn", "MessageSend", "Interrupt", "Done", "APPROVAL_TOOL", "APPROVAL_CALL_ID", "APPROVAL_ARGUMENTS",
    "MAX_ID_BYTES", "approval_answer_schema", "valid_id",
    "WorkerIdentity", "Call", "DecisionResponse", "DecisionRequest",
    "ClientInput", "ClientMessageInput", "ClientMessagesInput", "ClientActionInput", "InterruptResumeInput",
    "ToolResultInput", "ToolErrorInput",
]


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


# ---- string enums ---------------------------------------------------------

Role = Literal["system", "user", "assistant", "tool"]
Handler = Literal["server", "worker", "client"]
LlmHandler = Literal["server", "worker"]
ToolHandler = Literal["worker", "client"]
LlmFormat = Literal["openai", "anthropic"]
ReasoningEffort = Literal["xhigh", "high", "medium", "low", "minimal", "none"]
ErrorCode = Literal["provider_error", "rate_limited", "refused", "budget_exceeded", "deadline_exceeded"]
CallKind = Literal["tool_call", "llm_call", "sub_agent"]
CallStatus = Literal["pending", "completed", "failed", "retry_scheduled", "queued"]


# ---- unions ---------------------------------------------------------------


class _Tagged:
    """A member of a union tagged by a field: subclasses set ``_TAG``."""

    _TAG_FIELD: ClassVar[str] = "type"
    _TAG: ClassVar[Optional[str]] = None
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


# ---- messages -------------------------------------------------------------


@dataclass(kw_only=True)
class UrlRef:
    """``{url}``."""

    url: str


@dataclass(kw_only=True)
class FileData:
    """An inline file."""

    filename: str
    file_data: str


@dataclass(kw_only=True)
class AudioData:
    """Inline audio."""

    data: str
    format: str


class ContentPart(_Tagged):
    """One typed part of a message's content, tagged by ``type``."""


@dataclass(kw_only=True)
class TextPart(ContentPart):
    """``{type: "text", text}``."""

    _TAG = "text"
    text: str


@dataclass(kw_only=True)
class ImageUrlPart(ContentPart):
    """``{type: "image_url", image_url: {url}}``."""

    _TAG = "image_url"
    image_url: UrlRef


@dataclass(kw_only=True)
class FilePart(ContentPart):
    """``{type: "file", file: {filename, file_data}}``."""

    _TAG = "file"
    file: FileData


@dataclass(kw_only=True)
class InputAudioPart(ContentPart):
    """``{type: "input_audio", input_audio: {data, format}}``."""

    _TAG = "input_audio"
    input_audio: AudioData


@dataclass(kw_only=True)
class VideoUrlPart(ContentPart):
    """``{type: "video_url", video_url: {url}}``."""

    _TAG = "video_url"
    video_url: UrlRef


Content = Union[str, List[ContentPart]]
"""A message body: text, or typed parts."""


def _content_text(content: Optional[Content]) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "\n".join(p.text for p in content if isinstance(p, TextPart))


@dataclass(kw_only=True)
class FunctionCall:
    """The tool and arguments of a tool call; ``arguments`` is JSON text as
    the model wrote it."""

    name: str
    arguments: str


@dataclass(kw_only=True)
class ToolCall:
    """A model's request to call a tool."""

    id: str
    type: str = "function"
    function: FunctionCall

    @staticmethod
    def of(id: str, name: str, arguments: str) -> "ToolCall":
        """A ``function`` tool call."""
        return ToolCall(id=id, function=FunctionCall(name=name, arguments=arguments))


@dataclass(kw_only=True)
class Message:
    """A recorded message."""

    id: str
    role: Role
    content: Optional[Content] = None
    tool_calls: Optional[List[ToolCall]] = None
    tool_call_id: Optional[str] = None
    name: Optional[str] = None

    def text(self) -> str:
        """The text of the content (text parts joined by newlines)."""
        return _content_text(self.content)


@dataclass(kw_only=True)
class DraftMessage:
    """A message to record; the engine mints the id when it is omitted."""

    id: Optional[str] = None
    role: Role
    content: Optional[Content] = None
    tool_calls: Optional[List[ToolCall]] = None
    tool_call_id: Optional[str] = None
    name: Optional[str] = None

    @staticmethod
    def user(text: str) -> "DraftMessage":
        return DraftMessage(role="user", content=text)

    @staticmethod
    def assistant(text: str) -> "DraftMessage":
        return DraftMessage(role="assistant", content=text)

    @staticmethod
    def system(text: str) -> "DraftMessage":
        return DraftMessage(role="system", content=text)

    @staticmethod
    def tool(tool_call_id: str, text: str) -> "DraftMessage":
        """The answer to the tool call ``tool_call_id``."""
        return DraftMessage(role="tool", content=text, tool_call_id=tool_call_id)

    def with_id(self, id: str) -> "DraftMessage":
        self.id = id
        return self

    def text(self) -> str:
        return _content_text(self.content)


@dataclass(kw_only=True)
class TreeNode:
    """One message of a session's tree, with its parent's id."""

    message: Message
    parent_id: Optional[str] = None


@dataclass(kw_only=True)
class MessageTree:
    """Every message of a session, in recording order; ``head_id`` ends the
    active path."""

    nodes: List[TreeNode] = field(default_factory=list)
    head_id: Optional[str] = None


# ---- agent config -----------------------------------------------------------


@dataclass(kw_only=True)
class RetryPolicy:
    """Exponential backoff: doubling from the base, capped at the max."""

    _KEEP_NULL: ClassVar[FrozenSet[str]] = frozenset({"timeout_secs"})
    timeout_secs: Optional[float] = None
    max_retries: int = 0
    backoff_base_secs: float = 0.0
    backoff_max_secs: float = 0.0


@dataclass(kw_only=True)
class AgentTool:
    """A tool the model may call; ``input`` and ``output`` are JSON Schemas."""

    name: str
    description: Optional[str] = None
    input: Optional[Any] = None
    output: Optional[Any] = None
    handler: Optional[ToolHandler] = None


@dataclass(kw_only=True)
class SubAgent:
    """An agent this one may delegate to; the model sees it as a tool."""

    id: str
    description: Optional[str] = None


@dataclass(kw_only=True)
class AgentConfig:
    """What an agent is: ``model`` (``provider/model``) is the only required
    field."""

    model: str
    system: Optional[str] = None
    stream: Optional[bool] = None
    handler: Optional[LlmHandler] = None
    format: Optional[LlmFormat] = None
    retry: Optional[RetryPolicy] = None
    tools: Optional[List[AgentTool]] = None
    sub_agents: Optional[List[SubAgent]] = None

    def tool(self, name: str) -> Optional[AgentTool]:
        """The tool named ``name``."""
        return next((t for t in self.tools or [] if t.name == name), None)


# ---- LLM ------------------------------------------------------------------


@dataclass(kw_only=True)
class LlmTool:
    """A tool as the model sees it."""

    name: str
    description: str
    input: Optional[Any] = None
    output: Optional[Any] = None


@dataclass(kw_only=True)
class ReasoningConfig:
    """Reasoning settings."""

    effort: Optional[ReasoningEffort] = None
    max_tokens: Optional[int] = None
    exclude: Optional[bool] = None
    enabled: Optional[bool] = None


@dataclass(kw_only=True)
class LlmRequest:
    """A provider-neutral LLM request."""

    model: str
    messages: List[DraftMessage] = field(default_factory=list)
    tools: Optional[List[LlmTool]] = None
    temperature: Optional[float] = None
    max_completion_tokens: Optional[int] = None
    reasoning: Optional[ReasoningConfig] = None


@dataclass(kw_only=True)
class LlmResponse:
    """A provider-neutral LLM reply; ``cost`` is dollars as a decimal string."""

    model: str
    content: Optional[str] = None
    tool_calls: Optional[List[ToolCall]] = None
    finish_reason: Optional[str] = None
    usage: Optional[Any] = None
    cost: Optional[str] = None
    images: Optional[List[UrlRef]] = None


@dataclass(kw_only=True)
class ToolCallDelta:
    """A piece of a streamed tool call."""

    id: str
    name: Optional[str] = None
    arguments: Optional[str] = None


@dataclass(kw_only=True)
class StreamDelta:
    """A piece of a streamed LLM reply."""

    text: Optional[str] = None
    reasoning: Optional[str] = None
    tool_calls: Optional[List[ToolCallDelta]] = None
    finish_reason: Optional[str] = None


# ---- triggers ---------------------------------------------------------------


class ToolInput(_Tagged):
    """The engine's check of tool arguments against the input schema, tagged
    by ``status``."""

    _TAG_FIELD = "status"


@dataclass(kw_only=True)
class ValidInput(ToolInput):
    """``{status: "valid", value}``: the arguments, as the schema wants them."""

    _TAG = "valid"
    value: Any


@dataclass(kw_only=True)
class InvalidInput(ToolInput):
    """``{status: "invalid", value, error}``: parsed, but the schema says no."""

    _TAG = "invalid"
    value: Any
    error: str


@dataclass(kw_only=True)
class MalformedInput(ToolInput):
    """``{status: "malformed", error}``: not a JSON object."""

    _TAG = "malformed"
    error: str


@dataclass(kw_only=True)
class ClientContext:
    """What a client adds to a ``client.messages`` input."""

    tools: Optional[List[AgentTool]] = None
    context: Optional[List[Any]] = None
    state: Optional[Any] = None
    forwarded_props: Optional[Any] = None


class Trigger(_Tagged):
    """Why the engine asks for a decision, tagged by ``type``."""


@dataclass(kw_only=True)
class SessionStart(Trigger):
    """``session.start``."""

    _TAG = "session.start"


@dataclass(kw_only=True)
class ClientMessages(Trigger):
    """``client.messages``: the client's whole view; new ones from ``new_from``."""

    _TAG = "client.messages"
    messages: List[DraftMessage]
    new_from: int
    client: ClientContext = field(default_factory=ClientContext)


@dataclass(kw_only=True)
class ClientAction(Trigger):
    """``client.action``."""

    _TAG = "client.action"
    name: str
    args: Optional[Any] = None


@dataclass(kw_only=True)
class ToolExecute(Trigger):
    """``tool.execute``: run the tool ``name``. ``arguments`` is the raw text,
    ``input`` the engine's check of it."""

    _TAG = "tool.execute"
    id: str
    name: str
    arguments: str
    input: ToolInput
    attempt: int = 1
    deadline: Optional[str] = None


@dataclass(kw_only=True)
class ToolFinished(Trigger):
    """``tool.finished``; ``result`` is JSON text."""

    _TAG = "tool.finished"
    id: str
    ok: bool
    name: str
    result: Optional[str] = None
    error: Optional[str] = None


@dataclass(kw_only=True)
class LlmExecute(Trigger):
    """``llm.execute``: make the LLM call. ``request`` is an
    :class:`LlmRequest` as JSON, or the provider's own format when ``format``
    is set."""

    _TAG = "llm.execute"
    id: str
    request: Any
    format: Optional[LlmFormat] = None
    stream: bool = False
    attempt: int = 1
    deadline: Optional[str] = None

    def llm_request(self) -> LlmRequest:
        """The request as an :class:`LlmRequest`; fails for a provider-native
        one."""
        if self.format is not None:
            raise ProtocolError(f"the request is in the provider-native {self.format} format", "request")
        try:
            return from_json(LlmRequest, self.request)
        except ProtocolError as e:
            raise e.in_field("request") from None


@dataclass(kw_only=True)
class LlmFinished(Trigger):
    """``llm.finished``."""

    _TAG = "llm.finished"
    id: str
    ok: bool
    message: Optional[DraftMessage] = None
    truncated: bool = False
    usage: Optional[Any] = None
    cost: Optional[str] = None
    error: Optional[str] = None
    code: Optional[ErrorCode] = None
    detail: Optional[Any] = None


@dataclass(kw_only=True)
class SubAgentFinished(Trigger):
    """``sub_agent.finished``."""

    _TAG = "sub_agent.finished"
    id: str
    ok: bool
    session_id: str
    agent_id: str
    result: Optional[str] = None
    error: Optional[str] = None


@dataclass(kw_only=True)
class InterruptResumed(Trigger):
    """``interrupt.resumed``."""

    _TAG = "interrupt.resumed"
    interrupt_id: str
    payload: Optional[Any] = None


# ---- actions --------------------------------------------------------------


class Action(_Tagged):
    """What the engine should do next, tagged by ``type``. The static methods
    are the common actions (the names of the Rust ``Action`` constructors)."""

    @staticmethod
    def llm_call(**fields: Any) -> "LlmCall":
        """``llm.call``; omitted fields come from the agent config."""
        return LlmCall(**fields)

    @staticmethod
    def tool_call(name: str, arguments: Any, **fields: Any) -> "ToolCallAction":
        """``tool.call`` of ``name`` with ``arguments``."""
        return ToolCallAction(name=name, arguments=arguments, **fields)

    @staticmethod
    def tool_result(result: Any) -> "ToolResult":
        """``tool.result`` settling the call of the ``tool.execute`` answered."""
        return ToolResult(result=jsonable(result))

    @staticmethod
    def tool_error(error: str, **fields: Any) -> "ToolError":
        """``tool.error`` (terminal unless ``retryable=True``) settling the call
        of the ``tool.execute`` answered."""
        return ToolError(error=error, **fields)

    @staticmethod
    def llm_result(response: Any) -> "LlmResult":
        """``llm.result`` settling the call of the ``llm.execute`` answered;
        ``response`` is an :class:`LlmResponse` or provider-native JSON."""
        return LlmResult(response=jsonable(response))

    @staticmethod
    def llm_error(error: str, **fields: Any) -> "LlmError":
        """``llm.error`` settling the call of the ``llm.execute`` answered."""
        return LlmError(error=error, **fields)

    @staticmethod
    def interrupt(reason: str, payload: Any = None, interrupt_id: Optional[str] = None) -> "Interrupt":
        """``interrupt``; the engine mints the id when it is omitted."""
        return Interrupt(interrupt_id=interrupt_id, reason=reason, payload=jsonable(payload))

    @staticmethod
    def done(data: Any = None) -> "Done":
        """``done``, with ``data`` for clients when given."""
        return Done(data=jsonable(data))

    @staticmethod
    def done_with(data: Any) -> "Done":
        """``done`` carrying ``data``."""
        return Done(data=jsonable(data))

    @staticmethod
    def sub_agent_spawn(session_id: str, agent_id: str, tool_call_id: str, **fields: Any) -> "SubAgentSpawn":
        """``sub_agent.spawn``."""
        return SubAgentSpawn(session_id=session_id, agent_id=agent_id, tool_call_id=tool_call_id, **fields)

    @staticmethod
    def message_send(session_id: str, message: "DraftMessage") -> "MessageSend":
        """``message.send``."""
        return MessageSend(session_id=session_id, message=message)

    @staticmethod
    def spawn(session_id: str, agent_id: str, tool_call_id: str) -> "SubAgentSpawn":
        """``sub_agent.spawn`` of ``agent_id`` as the child session
        ``session_id``, answering the assistant tool call ``tool_call_id``,
        whose arguments become the child's first message."""
        return SubAgentSpawn(session_id=session_id, agent_id=agent_id, tool_call_id=tool_call_id)

    @staticmethod
    def approval(call_id: str, tool: str, arguments: Any) -> "Interrupt":
        """The ``interrupt`` asking a person to approve the tool call
        ``call_id`` of ``tool`` with ``arguments``: its id is the call id, its
        payload ``{"tool", "call_id", "arguments"}``, its ``resume_schema``
        :func:`approval_answer_schema` (the resume payload is
        ``{"approved": bool, "reason"?: str}``). A
        :class:`~subs_sdk.ToolRouter` opens and answers these for the tools
        it gates."""
        payload = {APPROVAL_TOOL: tool, APPROVAL_CALL_ID: call_id, APPROVAL_ARGUMENTS: jsonable(arguments)}
        return Interrupt(
            interrupt_id=call_id, reason=f"approve {tool}", payload=payload, resume_schema=approval_answer_schema()
        )


@dataclass(kw_only=True)
class LlmCall(Action):
    """``llm.call``: every field optional; explicit ``messages`` suppress the
    system prompt."""

    _TAG = "llm.call"
    id: Optional[str] = None
    model: Optional[str] = None
    messages: Optional[List[DraftMessage]] = None
    tools: Optional[List[LlmTool]] = None
    temperature: Optional[float] = None
    max_completion_tokens: Optional[int] = None
    reasoning: Optional[ReasoningConfig] = None
    stream: Optional[bool] = None
    retry: Optional[RetryPolicy] = None
    handler: Optional[LlmHandler] = None


@dataclass(kw_only=True)
class ToolCallAction(Action):
    """``tool.call``."""

    _TAG = "tool.call"
    id: Optional[str] = None
    name: str
    arguments: Any
    handler: Optional[ToolHandler] = None
    retry: Optional[RetryPolicy] = None


@dataclass(kw_only=True)
class ToolResult(Action):
    """``tool.result``; ``id`` and ``attempt`` default to the answered
    ``tool.execute``'s."""

    _TAG = "tool.result"
    id: Optional[str] = None
    attempt: Optional[int] = None
    result: Any


@dataclass(kw_only=True)
class CallError(Action):
    """The shape of ``tool.error`` and ``llm.error``."""

    id: Optional[str] = None
    attempt: Optional[int] = None
    error: str
    retryable: Optional[bool] = None
    code: Optional[ErrorCode] = None
    detail: Optional[Any] = None


@dataclass(kw_only=True)
class ToolError(CallError):
    """``tool.error``."""

    _TAG = "tool.error"


@dataclass(kw_only=True)
class LlmResult(Action):
    """``llm.result``: an :class:`LlmResponse` as JSON, or the provider's own
    format when the ``llm.execute`` had one."""

    _TAG = "llm.result"
    id: Optional[str] = None
    attempt: Optional[int] = None
    response: Any


@dataclass(kw_only=True)
class LlmError(CallError):
    """``llm.error``."""

    _TAG = "llm.error"


@dataclass(kw_only=True)
class SubAgentSpawn(Action):
    """``sub_agent.spawn``."""

    _TAG = "sub_agent.spawn"
    session_id: str
    agent_id: str
    tool_call_id: str
    retry: Optional[RetryPolicy] = None


@dataclass(kw_only=True)
class MessageSend(Action):
    """``message.send``."""

    _TAG = "message.send"
    session_id: str
    message: DraftMessage


@dataclass(kw_only=True)
class Interrupt(Action):
    """``interrupt``."""

    _TAG = "interrupt"
    interrupt_id: Optional[str] = None
    reason: str
    payload: Optional[Any] = None
    #: A JSON Schema the resume payload must satisfy.
    resume_schema: Optional[Any] = None


@dataclass(kw_only=True)
class Done(Action):
    """``done``: ends the turn."""

    _TAG = "done"
    data: Optional[Any] = None


# ---- approvals and delegation ------------------------------------------------

#: The payload key naming the tool of an approval request.
APPROVAL_TOOL = "tool"
#: The payload key holding the call id of an approval request.
APPROVAL_CALL_ID = "call_id"
#: The payload key holding the arguments of an approval request.
APPROVAL_ARGUMENTS = "arguments"
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


# ---- the decision exchange -------------------------------------------------


@dataclass(kw_only=True)
class WorkerIdentity:
    """The session's owner, without the tenant."""

    id: Optional[str] = None
    metadata: Optional[Dict[str, str]] = None


@dataclass(kw_only=True)
class Call:
    """A call the engine tracks."""

    id: str
    kind: CallKind
    status: CallStatus
    attempt: int
    deadline: Optional[str] = None
    anchor: Optional[str] = None
    name: Optional[str] = None
    arguments: Optional[str] = None
    handler: Optional[Handler] = None
    stream: Optional[bool] = None
    agent_id: Optional[str] = None
    session_id: Optional[str] = None


@dataclass(kw_only=True)
class DecisionResponse:
    """A decision: messages to record, actions, the new state and config.
    Every field is optional; ``DecisionResponse()`` decides nothing. The
    ``with_*`` methods add to it and return it, for chaining."""

    messages: Optional[List[DraftMessage]] = None
    actions: Optional[List[Action]] = None
    state: Optional[Any] = None
    agent: Optional[AgentConfig] = None

    def with_message(self, message: DraftMessage) -> "DecisionResponse":
        if self.messages is None:
            self.messages = []
        self.messages.append(message)
        return self

    def with_action(self, action: Action) -> "DecisionResponse":
        if self.actions is None:
            self.actions = []
        self.actions.append(action)
        return self

    def with_state(self, state: Any) -> "DecisionResponse":
        self.state = jsonable(state)
        return self

    def with_agent(self, agent: AgentConfig) -> "DecisionResponse":
        self.agent = agent
        return self

    def is_empty(self) -> bool:
        return not self.messages and not self.actions and self.state is None and self.agent is None

    def replace_actions(self, actions: Iterable[Action]) -> "DecisionResponse":
        """The same decision with ``actions`` instead of its own: keep what a
        proposal records (messages, state, config) and decide something
        else."""
        listed = list(actions)
        self.actions = listed or None
        return self

    def delegate(self, request: "DecisionRequest", agent_id: str, input: str) -> "DecisionResponse":
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
        n = sum(1 for a in self.actions or [] if isinstance(a, SubAgentSpawn)) + 1
        call_id = _bounded_id(f"delegate.{request.decision_id}.{n}")
        session_id = _bounded_id(f"{request.session_id}.{call_id}")
        message = DraftMessage(role="assistant", tool_calls=[ToolCall.of(call_id, agent_id, input)])
        return self.with_message(message).with_action(Action.spawn(session_id, agent_id, call_id))


@dataclass(kw_only=True)
class DecisionRequest:
    """What the engine asks. The defaults make a minimal request (a new
    session, first delivery) for tests: ``DecisionRequest(trigger=SessionStart())``."""

    _KEEP_NULL: ClassVar[FrozenSet[str]] = frozenset({"agent", "deadline", "turn_id"})
    session_id: str = "session"
    decision_id: str = "decision"
    agent_id: str = "agent"
    identity: WorkerIdentity = field(default_factory=WorkerIdentity)
    trigger: Trigger
    proposed: DecisionResponse = field(default_factory=DecisionResponse)
    state: Any = None
    agent: Optional[AgentConfig] = None
    calls: List[Call] = field(default_factory=list)
    pending_calls: int = 0
    messages: List[Message] = field(default_factory=list)
    message_tree: MessageTree = field(default_factory=MessageTree)
    ancestry: List[str] = field(default_factory=list)
    attempts: int = 1
    deadline: Optional[str] = None
    turn_id: Optional[str] = None

    @staticmethod
    def for_trigger(trigger: Trigger) -> "DecisionRequest":
        """A minimal request for ``trigger``, as in the Rust SDK."""
        return DecisionRequest(trigger=trigger)

    def call(self, id: str) -> Optional[Call]:
        """The in-flight call with this id."""
        return next((c for c in self.calls if c.id == id), None)


# ---- client inputs -----------------------------------------------------------


class ClientInput(_Tagged):
    """What a client posts to a session, tagged by ``type``."""


@dataclass(kw_only=True)
class ClientMessageInput(ClientInput):
    _TAG = "client.message"
    agent_id: str
    turn_id: Optional[str] = None
    message: DraftMessage
    stream: Optional[bool] = None


@dataclass(kw_only=True)
class ClientMessagesInput(ClientInput):
    _TAG = "client.messages"
    agent_id: str
    turn_id: Optional[str] = None
    messages: List[DraftMessage]
    stream: Optional[bool] = None
    client: Optional[ClientContext] = None


@dataclass(kw_only=True)
class ClientActionInput(ClientInput):
    _TAG = "client.action"
    agent_id: str
    turn_id: Optional[str] = None
    name: str
    args: Optional[Any] = None


@dataclass(kw_only=True)
class InterruptResumeInput(ClientInput):
    _TAG = "interrupt.resume"
    interrupt_id: str
    payload: Optional[Any] = None


@dataclass(kw_only=True)
class ToolResultInput(ClientInput):
    _TAG = "tool.result"
    id: str
    attempt: Optional[int] = None
    result: Optional[Any] = None


@dataclass(kw_only=True)
class ToolErrorInput(ClientInput):
    _TAG = "tool.error"
    id: str
    error: str
    retryable: bool
    attempt: Optional[int] = None


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
        hints = get_type_hints(cls)
        keep: FrozenSet[str] = getattr(cls, "_KEEP_NULL", frozenset())
        plan = []
        for f in dataclasses.fields(cls):
            tp = hints[f.name]
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
        expected = ", ".join(f"`{t}`" for t in base._VARIANTS)
        raise ProtocolError(f"{tag_field}: unknown variant `{tag}`, expected one of {expected}")
    return _decode_struct(variant, value)


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
    other dataclasses as dicts, tuples as lists; the rest as it is."""
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        if type(value).__module__ == __name__:
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
    protocol's key order)."""
    if isinstance(value, list):
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
    for cls in list(globals().values()):
        if isinstance(cls, type) and dataclasses.is_dataclass(cls) and cls.__module__ == __name__:
            _plan(cls)


_warm()
