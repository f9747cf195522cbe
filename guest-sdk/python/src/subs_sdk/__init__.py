"""Write subs agents in Python, as WebAssembly components (componentize-py).

An agent is a subclass of :class:`Agent`; its module exports it with one
line::

    import subs_sdk

    class Passthrough(subs_sdk.Agent):
        pass            # returns the engine's proposal: a complete chat agent

    WitWorld = subs_sdk.export(Passthrough())

The engine calls the component's ``decide`` export whenever it needs to know
what happens next in a session; :meth:`Agent.decide` gets the
:class:`DecisionRequest` and a :class:`Context` (logs, streamed deltas) and
returns the :class:`DecisionResponse`.

Layout:

- :mod:`subs_sdk.protocol`: the protocol's types (dataclasses) and their JSON.
- :mod:`subs_sdk.wit`: their mapping to the componentize-py bindings of
  ``subs:agent`` (the twin of the engine's ``wit.rs``).
- :mod:`subs_sdk.agent`: :class:`Agent`, :class:`Context`, :class:`Host`,
  :class:`Level`, :class:`DecideError`.
- :mod:`subs_sdk.tools`: :func:`tool`, :class:`ToolRouter` (approvals,
  sub-agents as tools), :class:`ToolContext`.
- :mod:`subs_sdk.testing`: :class:`RecordingHost`, :func:`tool_execute`.
- :mod:`subs_sdk.component`: :func:`export`.

Nothing but :mod:`subs_sdk.component` knows about WebAssembly, and it
imports the bindings only where they exist: agents are unit tested natively.
"""

from .agent import Agent, Context, DecideError, Host, Level
from .branch import BranchError, ClientView, Messages, MessageSource
from .component import export
from .protocol import (
    ProtocolError,
    from_json,
    to_json,
    to_value,
    js_number,
    jsonable,
    parse_json,
    dump_json,
    Role,
    Handler,
    LlmHandler,
    ToolHandler,
    LlmFormat,
    ReasoningEffort,
    ErrorCode,
    CallKind,
    CallStatus,
    UrlRef,
    FileData,
    AudioData,
    ContentPart,
    TextPart,
    ImageUrlPart,
    FilePart,
    InputAudioPart,
    VideoUrlPart,
    Content,
    FunctionCall,
    ToolCall,
    Message,
    DraftMessage,
    TreeNode,
    MessageTree,
    RetryPolicy,
    AgentTool,
    SubAgent,
    McpServerUse,
    AgentConfig,
    LlmTool,
    ReasoningConfig,
    LlmRequest,
    LlmResponse,
    ToolCallDelta,
    StreamDelta,
    ToolInput,
    ValidInput,
    InvalidInput,
    MalformedInput,
    ClientContext,
    Trigger,
    SessionStart,
    ClientMessages,
    ClientAction,
    ToolExecute,
    ToolFinished,
    LlmExecute,
    LlmFinished,
    SubAgentFinished,
    InterruptResumed,
    Action,
    LlmCall,
    ToolCallAction,
    ToolResult,
    CallError,
    ToolError,
    LlmError,
    LlmResult,
    SubAgentSpawn,
    MessageSend,
    Interrupt,
    Done,
    WorkerIdentity,
    Call,
    DecisionResponse,
    DecisionRequest,
    ClientInput,
    ClientMessageInput,
    ClientMessagesInput,
    ClientActionInput,
    InterruptResumeInput,
    ToolResultInput,
    ToolErrorInput,
    Resumer,
    SessionEvent,
    TenantResumer,
    EndUserResumer,
    TurnStartedEvent,
    MessageEvent,
    LlmTokenDeltaEvent,
    ToolCallEvent,
    InterruptEvent,
    InterruptResumedEvent,
    TurnDoneEvent,
    TurnFailedEvent,
    StateEvent,
    ClientToolCall,
    InterruptAnswered,
    InterruptRaised,
    MessageRecorded,
    StateChanged,
    TokenDelta,
    TurnDone,
    TurnFailed,
    TurnStarted,
    LiveEvent,
    StreamEvent,
    ToolProgress,
    ToolProgressEvent,
    APPROVAL_TOOL,
    APPROVAL_CALL_ID,
    APPROVAL_ARGUMENTS,
    MAX_ID_BYTES,
    approval_answer_schema,
    valid_id,
)
from .testing import RecordingHost, tool_execute
from .tools import APPROVALS_STATE_KEY, ArgumentError, Tool, ToolContext, ToolRouter, schema_of, tool

__version__ = "0.1.0"

# The common actions as functions: `subs_sdk.tool_result(...)`.
llm_call = Action.llm_call
tool_call = Action.tool_call
tool_result = Action.tool_result
tool_error = Action.tool_error
llm_result = Action.llm_result
llm_error = Action.llm_error
interrupt = Action.interrupt
done = Action.done
done_with = Action.done_with
sub_agent_spawn = Action.sub_agent_spawn
spawn = Action.spawn
approval = Action.approval
message_send = Action.message_send

# Static, so that type checkers see every name as exported.
__all__ = [
    "Agent", "Context", "DecideError", "Host", "Level", "Messages", "MessageSource", "ClientView", "BranchError", "export", "RecordingHost", "tool_execute", "Tool",
    "ToolRouter", "ToolContext", "ArgumentError", "APPROVALS_STATE_KEY", "schema_of", "tool", "spawn", "approval", "llm_call", "tool_call", "tool_result", "tool_error", "llm_result",
    "llm_error", "interrupt", "done", "done_with", "sub_agent_spawn", "message_send", "ProtocolError",
    "from_json", "to_json", "to_value", "js_number", "jsonable", "parse_json", "dump_json", "Role", "Handler",
    "LlmHandler", "ToolHandler", "LlmFormat", "ReasoningEffort", "ErrorCode", "CallKind", "CallStatus",
    "UrlRef", "FileData", "AudioData", "ContentPart", "TextPart", "ImageUrlPart", "FilePart",
    "InputAudioPart", "VideoUrlPart", "Content", "FunctionCall", "ToolCall", "Message", "DraftMessage",
    "TreeNode", "MessageTree", "RetryPolicy", "AgentTool", "SubAgent", "McpServerUse", "AgentConfig", "LlmTool",
    "ReasoningConfig", "LlmRequest", "LlmResponse", "ToolCallDelta", "StreamDelta", "ToolInput", "ValidInput",
    "InvalidInput", "MalformedInput", "ClientContext", "Trigger", "SessionStart", "ClientMessages",
    "ClientAction", "ToolExecute", "ToolFinished", "LlmExecute", "LlmFinished", "SubAgentFinished",
    "InterruptResumed", "Action", "LlmCall", "ToolCallAction", "ToolResult", "CallError", "ToolError",
    "LlmError", "LlmResult", "SubAgentSpawn", "MessageSend", "Interrupt", "Done", "WorkerIdentity", "Call",
    "DecisionResponse", "DecisionRequest", "ClientInput", "ClientMessageInput", "ClientMessagesInput",
    "ClientActionInput", "InterruptResumeInput", "ToolResultInput", "ToolErrorInput",
    "Resumer", "SessionEvent", "TenantResumer", "EndUserResumer", "TurnStartedEvent", "MessageEvent", "LlmTokenDeltaEvent", "ToolCallEvent", "InterruptEvent", "InterruptResumedEvent", "TurnDoneEvent", "TurnFailedEvent", "StateEvent", "ClientToolCall", "InterruptAnswered", "InterruptRaised", "MessageRecorded", "StateChanged", "TokenDelta", "TurnDone", "TurnFailed", "TurnStarted",
    "LiveEvent", "StreamEvent", "ToolProgress", "ToolProgressEvent",
    "APPROVAL_TOOL", "APPROVAL_CALL_ID", "APPROVAL_ARGUMENTS", "MAX_ID_BYTES",
    "approval_answer_schema", "valid_id",
]
