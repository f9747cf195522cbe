"""The approver agent in Python: ``lookup_order``; ``refund``, which needs a
person's approval and counts the refunds it made in the session state (so a
state without a count proves a denied refund never ran); ``summarizer``, a
sub-agent the model may call as a tool, and to which a message starting
with ``summarize:`` is delegated. ``tests/all/approval_py.rs`` drives it
through the server."""

from dataclasses import dataclass
from typing import Annotated, Any, Dict

import subs_sdk
from subs_sdk import AgentConfig, ClientMessages, Context, DecisionRequest, DecisionResponse, SessionStart
from subs_sdk import ToolContext, ToolRouter


@dataclass
class Refunds:
    """The session state: refunds made so far."""

    refunds: int = 0


router = ToolRouter().sub_agent("summarizer", "Summarizes a text")


@router.tool
def lookup_order(order_id: str) -> Dict[str, Any]:
    """Looks an order up."""
    return {"order_id": order_id, "status": "shipped"}


@router.tool(needs_approval=True)
def refund(order_id: str, amount: Annotated[int, {"minimum": 1}], cx: ToolContext[Refunds]) -> Dict[str, Any]:
    """Refunds an amount on an order."""
    cx.state.refunds += 1
    cx.info(f"refunded {amount} on {order_id}")
    return {"refunded": amount, "refunds": cx.state.refunds}


class Approver(subs_sdk.Agent):
    def decide(self, request: DecisionRequest, cx: Context) -> DecisionResponse:
        trigger = request.trigger
        if isinstance(trigger, SessionStart):
            model = request.proposed.agent.model if request.proposed.agent else "subs/offline"
            return request.proposed.with_agent(router.configure(AgentConfig(model=model)))
        if isinstance(trigger, ClientMessages) and trigger.messages:
            text = trigger.messages[-1].text()
            if text.startswith("summarize: "):
                proposal = request.proposed.replace_actions([])
                return proposal.delegate(request, "summarizer", text.removeprefix("summarize: "))
        return router.handle(request, cx)


WitWorld = subs_sdk.export(Approver())
