"""A subs agent with tools of its own: ``add`` sums two numbers,
``get_time`` tells the current time. The Python twin of ``examples/tools``.

At ``session.start`` the agent declares itself: the model the engine
proposes, a system prompt, and the two tools. When the model calls a tool,
the engine sends ``tool.execute`` and the agent runs it through a
:class:`~subs_sdk.ToolRouter`. Every other trigger takes the engine's
proposal, so the rest of the loop is the engine's.
"""

import math
import time
from decimal import Decimal
from typing import Annotated, TypedDict

import subs_sdk
from subs_sdk import AgentConfig, DecisionRequest, DecisionResponse, SessionStart, ToolExecute

#: The model to use when the engine proposes none and the session has no
#: config yet.
DEFAULT_MODEL = "openai/gpt-4o-mini"

#: What the model is told about its job.
SYSTEM_PROMPT = (
    "You are a helpful assistant. For arithmetic, call the `add` tool "
    "instead of computing sums yourself. For the current date or time, call `get_time`, which "
    "returns Unix time in milliseconds."
)


class Sum(TypedDict):
    sum: float


class Time(TypedDict):
    unix_ms: Annotated[int, {"minimum": 0}]


@subs_sdk.tool
def add(a: Annotated[float, "The first addend"], b: Annotated[float, "The second addend"]) -> Sum:
    """Adds two numbers and returns their sum."""
    # Inside a component stdout goes to the engine's logs, tagged with the
    # tenant, agent and session.
    print(f"add({_display(a)}, {_display(b)})")
    total = a + b
    if not math.isfinite(total):
        raise ValueError(f"{_display(a)} + {_display(b)} is too large for a JSON number")
    return {"sum": subs_sdk.js_number(total)}


@subs_sdk.tool
def get_time() -> Time:
    """Returns the current time as Unix time in milliseconds."""
    return {"unix_ms": time.time_ns() // 1_000_000}


def _display(x: float) -> str:
    """``x`` as Rust's ``Display`` writes it (no exponent, no ``.0``), so the
    error reads the same as the Rust agent's."""
    text = format(Decimal(repr(x)), "f")
    return text[:-2] if text.endswith(".0") else text


class Tools(subs_sdk.Agent):
    """The agent: a router with its two tools."""

    def __init__(self) -> None:
        self.router = subs_sdk.ToolRouter([add, get_time])

    def config(self, model: str) -> AgentConfig:
        """The config the agent runs with: ``model``, the prompt, the tools."""
        return AgentConfig(model=model, system=SYSTEM_PROMPT, tools=self.router.tools())

    def decide(self, request: DecisionRequest, cx: subs_sdk.Context) -> DecisionResponse:
        trigger = request.trigger
        if isinstance(trigger, SessionStart):
            agent = request.proposed.agent or request.agent
            model = agent.model if agent is not None else DEFAULT_MODEL
            return request.proposed.with_agent(self.config(model))
        if isinstance(trigger, ToolExecute):
            return request.proposed.with_action(self.router.execute(trigger))
        return request.proposed


WitWorld = subs_sdk.export(Tools())
