"""Not a unit test: an agent written against the SDK's types, which `mypy`
checks under --strict with the SDK (see [tool.mypy] in pyproject.toml).
It fails to type-check if the SDK stops exporting a name, or loses the
types of what an agent touches: a tool keeps its function's signature, the
protocol types are dataclasses, the builders return the actions they name.
The `# type: ignore[code]` lines are mistakes mypy must report (strict mode
reports an ignore that is not needed, so each proves its error)."""

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
    Tool,
    ToolExecute,
    ToolResult,
    ToolRouter,
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
