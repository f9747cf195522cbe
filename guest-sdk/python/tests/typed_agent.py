"""Not a unit test: an agent written against the SDK's types, which `mypy`
checks under --strict with the SDK (see [tool.mypy] in pyproject.toml).
It fails to type-check if the SDK stops exporting a name, or loses the
types of what an agent touches: a tool keeps its function's signature, the
protocol types are dataclasses, the builders return the actions they name.
The `# type: ignore[code]` lines are mistakes mypy must report (strict mode
reports an ignore that is not needed, so each proves its error)."""

from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypedDict, assert_type

import subs_sdk
from subs_sdk import (
    Action,
    AgentConfig,
    Context,
    DecideError,
    DecisionRequest,
    DecisionResponse,
    Done,
    Interrupt,
    RecordingHost,
    SessionStart,
    SubAgentSpawn,
    Tool,
    ToolContext,
    ToolExecute,
    ToolResult,
    ToolRouter,
    WorkerIdentity,
    from_json,
    tool,
    tool_execute,
)


class Sum(TypedDict):
    sum: float


@tool
def add(a: Annotated[float, "The first addend"], b: float) -> Sum:
    """Adds two numbers."""
    return {"sum": a + b}


@tool(description="Says where a call came from.")
def whence(call: ToolExecute, unit: Literal["s", "ms"] = "s") -> str:
    return f"{call.id} in {unit}"


router = ToolRouter([add, whence])


@router.tool
def double(x: int) -> int:
    """Doubles an integer."""
    return 2 * x


assert_type(add(1.0, 2.0), Sum)
assert_type(double(2), int)
assert_type(router.execute(tool_execute("add", '{"a": 1, "b": 2}')), Action)
add("1", 2.0)  # type: ignore[arg-type]
double(1.5)  # type: ignore[arg-type]


class Counter(subs_sdk.Agent):
    """Counts its turns in the session's state."""

    def decide(self, request: DecisionRequest, cx: Context) -> DecisionResponse:
        trigger = request.trigger
        cx.info(f"trigger {trigger.kind}")
        if isinstance(trigger, SessionStart):
            return request.proposed.with_agent(AgentConfig(model="openai/gpt-4o-mini", tools=router.tools()))
        if isinstance(trigger, ToolExecute):
            return request.proposed.with_action(router.execute(trigger))
        if trigger.kind == "client.action":
            raise DecideError.retryable_error("not yet")
        count = request.state.get("count", 0) if isinstance(request.state, dict) else 0
        return request.proposed.with_state({"count": count + 1})


decision = RecordingHost().decide(Counter(), DecisionRequest(trigger=SessionStart()))
assert_type(decision, DecisionResponse)
assert_type(subs_sdk.tool_result({"sum": 3}), ToolResult)
assert_type(subs_sdk.interrupt("approve?", {"amount": 5}), Interrupt)
assert_type(subs_sdk.done(), Done)
assert_type(from_json(DecisionResponse, "{}"), DecisionResponse)
assert_type(RecordingHost().decide_json(Counter(), "{}"), dict[str, Any])
tools: list[Tool[..., object]] = [add, whence, double]
DecisionResponse(actions=[Action.tool_error("no", retryable=True)], state={"count": 1})
DecisionResponse(actions=["done"])  # type: ignore[list-item]


# Approvals, a tool context with typed state, sub-agents, delegation.
@dataclass
class Refunds:
    count: int = 0


approver = ToolRouter().sub_agent("summarizer", "Summarizes a text")


@approver.tool(needs_approval=lambda args: args["amount"] > 10)
def refund(order_id: str, amount: float, cx: ToolContext[Refunds]) -> str:
    """Refunds an order."""
    assert_type(cx.state, Refunds)
    assert_type(cx.call_id, str)
    assert_type(cx.identity, WorkerIdentity)
    cx.state.count += 1
    cx.state.count = "many"  # type: ignore[assignment]
    cx.info(f"refund {order_id}")
    return "refunded"


assert_type(refund("A1", 5.0, ToolContext(Refunds(), tool_execute("refund", "{}"), None, RecordingHost())), str)
assert_type(approver.handle(DecisionRequest(trigger=SessionStart()), Context(RecordingHost())), DecisionResponse)
assert_type(Action.approval("c1", "refund", {"amount": 5}), Interrupt)
assert_type(Action.spawn("s", "summarizer", "c1"), SubAgentSpawn)
assert_type(DecisionResponse().delegate(DecisionRequest(trigger=SessionStart()), "summarizer", "hi"), DecisionResponse)
assert_type(DecisionResponse().replace_actions([Action.done()]), DecisionResponse)
DecisionResponse().delegate(DecisionRequest(trigger=SessionStart()), "summarizer", {"text": "hi"})  # type: ignore[arg-type]


# The branch, read on demand in a component, held in memory from JSON (an
# HTTP worker, a test): a `Messages` either way, and typed as one.
def recent_text(request: DecisionRequest) -> str:
    assert_type(request.messages, subs_sdk.Messages)
    assert_type(request.messages[-1], subs_sdk.Message)
    assert_type(request.messages.last(2), list[subs_sdk.Message])
    assert_type(request.messages.after("m1"), list[subs_sdk.Message] | None)
    assert_type(request.messages.position("m1"), int | None)
    assert_type(request.messages.tree, subs_sdk.MessageTree)
    request.messages.last("2")  # type: ignore[arg-type]
    return " ".join(m.text() for m in request.messages.last(3))


def from_an_http_worker(body: str) -> str:
    request = from_json(DecisionRequest, body)
    assert_type(request.messages, subs_sdk.Messages)
    return recent_text(request)


DecisionRequest(trigger=SessionStart(), messages=subs_sdk.Messages([subs_sdk.Message(id="m1", role="user", content="hi")]))


# A `client.messages` trigger's view: a `ClientView` of drafts, read on
# demand in a component, held otherwise.
def new_text(request: DecisionRequest) -> str:
    trigger = request.trigger
    if not isinstance(trigger, subs_sdk.ClientMessages):
        return ""
    assert_type(trigger.messages, subs_sdk.ClientView)
    assert_type(trigger.messages[-1], subs_sdk.DraftMessage)
    assert_type(trigger.messages[trigger.new_from :], list[subs_sdk.DraftMessage])
    assert_type(trigger.messages.is_read, bool)
    trigger.messages.tree  # type: ignore[attr-defined]
    return " ".join(m.text() for m in trigger.messages[trigger.new_from :])


subs_sdk.ClientMessages(messages=subs_sdk.ClientView([subs_sdk.DraftMessage.user("hi")]), new_from=0)


# `Messages.of` gives the same (and wraps a list set on a request later).
def newest_text(request: DecisionRequest) -> str:
    messages = subs_sdk.Messages.of(request)
    assert_type(messages[-1], subs_sdk.Message)
    assert_type(messages[-3:], list[subs_sdk.Message])
    assert_type(messages.last(2), list[subs_sdk.Message])
    assert_type(messages.after("m1"), list[subs_sdk.Message] | None)
    assert_type(messages.position("m1"), int | None)
    assert_type(messages.tree, subs_sdk.MessageTree)
    messages.last("2")  # type: ignore[arg-type]
    return messages[-1].text() if messages else ""
