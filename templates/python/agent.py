"""{{name}}: a subs agent.

The model may call two tools: ``lookup_order``, which counts the lookups in
the agent state, and ``refund``, which runs only once a person approved the
call (the SDK asks with an interrupt; a denial reaches the model as the
call's error, and the tool never runs). Everything else (calling the model,
recording replies, ending turns) is the engine's.
"""

from dataclasses import dataclass
from typing import Any, Dict

import subs_sdk
from subs_sdk import AgentConfig, Context, DecisionRequest, DecisionResponse, SessionStart, ToolContext, ToolRouter

#: The model used when the engine proposes none.
DEFAULT_MODEL = "subs/offline"


@dataclass
class State:
    """The agent's state, kept by the engine with the session."""

    #: How many orders were looked up in this session.
    lookups: int = 0


router = ToolRouter()


@router.tool
def lookup_order(order_id: str, cx: ToolContext[State]) -> Dict[str, Any]:
    """Looks an order up by its id."""
    cx.state.lookups += 1
    return {"order_id": order_id, "status": "shipped"}


@router.tool(needs_approval=True)
def refund(order_id: str, amount: float) -> Dict[str, Any]:
    """Refunds an amount of an order."""
    return {"refunded": amount, "order_id": order_id}


class App(subs_sdk.Agent):
    """The agent: its tools, and its config at the session's start."""

    def decide(self, request: DecisionRequest, cx: Context) -> DecisionResponse:
        if isinstance(request.trigger, SessionStart):
            model = request.proposed.agent.model if request.proposed.agent else DEFAULT_MODEL
            config = AgentConfig(model=model, system="You help customers with their orders.")
            return request.proposed.with_agent(router.configure(config))
        return router.handle(request, cx)


WitWorld = subs_sdk.export(App())
