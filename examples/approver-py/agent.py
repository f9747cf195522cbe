"""approver-py: the approver agent in Python.

The model may call ``lookup_order``; ``refund``, which runs only once a
person approved the call (the SDK asks with an interrupt; a denial reaches
the model as the call's error, and the tool never runs) and counts the
refunds in the agent state; and ``summarizer``, another agent, as a tool
(the engine runs it as a child session and its reply is the call's result).
Everything else (calling the model, recording replies, ending turns) is the
engine's.
"""

from dataclasses import dataclass
from typing import Annotated, Any, Dict

import subs_sdk
from subs_sdk import AgentConfig, Context, DecisionRequest, DecisionResponse, SessionStart, ToolContext, ToolRouter

#: The model used when the engine proposes none.
DEFAULT_MODEL = "subs/offline"


@dataclass
class State:
    """The agent's state, kept by the engine with the session."""

    #: How many refunds ran in this session.
    refunds: int = 0


router = ToolRouter().sub_agent("summarizer", "Summarizes a text.")


@router.tool
def lookup_order(order_id: str) -> Dict[str, Any]:
    """Looks an order up."""
    return {"order_id": order_id, "status": "shipped"}


@router.tool(needs_approval=True)
def refund(order_id: str, amount: Annotated[int, {"minimum": 1}], cx: ToolContext[State]) -> Dict[str, Any]:
    """Refunds an amount of an order."""
    cx.state.refunds += 1
    cx.info(f"refunded {amount} on {order_id}")
    return {"refunded": amount, "refunds": cx.state.refunds}


class App(subs_sdk.Agent):
    """The agent: its tools and sub-agent, and its config at the session's start."""

    def decide(self, request: DecisionRequest, cx: Context) -> DecisionResponse:
        if isinstance(request.trigger, SessionStart):
            model = request.proposed.agent.model if request.proposed.agent else DEFAULT_MODEL
            config = AgentConfig(model=model, system="You help customers with their orders.")
            return request.proposed.with_agent(router.configure(config))
        return router.handle(request, cx)


WitWorld = subs_sdk.export(App())
