"""A test agent that reads its decision's branch on demand (``request.messages``
over the ``messages`` resource of subs:agent@0.2.0) and reports what it read
in its ``state``, so a test can hold each answer against what the engine
stored; it answers with its ``proposed`` decision otherwise. The Python twin
of ``tests/components/branch``.

``state.read`` reports, without reading the branch whole: ``len``, the
``last`` message (id, role, text), ``first`` (the message at index 0),
``after_first`` (how many messages follow the first), ``position_last`` (the
last message's index, by id), the last two ids (``last_2``), whether that
read the path whole (``whole``: it must not), and the tree (``tree``: each
node's id and parent id). ``state.path`` is every id of the path read whole,
when the client asked for it (``client.action`` named ``whole``).

``state.view`` reports what it read of a ``client.messages`` trigger's view
(its leading messages shared with the branch): ``len``, ``new_from``, the
``first`` and ``last`` messages, the ``new`` ones (from ``new_from`` on),
whether that read the view whole (``whole``: it must not), then every id of
the view read whole (``ids``). Other triggers carry the previous
``state.view`` over.

It keeps each decision's branch in a global. When one instance is asked
again (the engine never does; a test of the host does), it reads the kept
branch first: that read must fail, as the branch belongs to a decision that
is over, and the failure fails the decision."""

from typing import Any, Dict, Optional, Union

import subs_sdk
from subs_sdk import ClientAction, ClientMessages, DecisionRequest, DecisionResponse, DraftMessage, Message, Messages

# The branch of this instance's previous decision.
KEPT: Optional[Messages] = None


def summary(message: Union[Message, DraftMessage, None]) -> Any:
    if message is None:
        return None
    return {"id": message.id, "role": message.role, "text": message.text()}


def read_view(trigger: ClientMessages) -> Dict[str, Any]:
    view = trigger.messages
    n = len(view)
    out: Dict[str, Any] = {
        "len": n,
        "new_from": trigger.new_from,
        "first": summary(view[0]) if n else None,
        "last": summary(view[n - 1]) if n else None,
        "new": [summary(m) for m in view[trigger.new_from :]],
    }
    # None of the reads above read the view whole; the ids below do.
    out["whole"] = view.is_read
    out["ids"] = [m.id for m in view]
    return out


class BranchReader(subs_sdk.Agent):
    def decide(self, request: DecisionRequest, cx: subs_sdk.Context) -> DecisionResponse:
        global KEPT
        messages = Messages.of(request)
        kept, KEPT = KEPT, messages
        if kept is not None:
            # Asks the engine (a position is never kept): it refuses.
            kept.position("m0")
        first = messages[0] if len(messages) else None
        last = messages[-1] if len(messages) else None
        after = messages.after(first.id) if first is not None else None
        read: Dict[str, Any] = {
            "len": len(messages),
            "last": summary(last),
            "first": summary(first),
            "after_first": None if after is None else len(after),
            "position_last": messages.position(last.id) if last is not None else None,
            "last_2": [m.id for m in messages.last(2)],
        }
        # None of the reads above read the path whole; the tree's does.
        read["whole"] = messages.is_read
        read["tree"] = [{"id": n.message.id, "parent": n.parent_id} for n in request.message_tree.nodes]
        state: Dict[str, Any] = {"read": read}
        trigger = request.trigger
        if isinstance(trigger, ClientAction) and trigger.name == "whole":
            state["path"] = [m.id for m in messages]
        if isinstance(trigger, ClientMessages):
            state["view"] = read_view(trigger)
        else:
            previous = request.state if isinstance(request.state, dict) else {}
            state["view"] = previous.get("view")
        decision = request.proposed
        decision.state = state
        return decision


WitWorld = subs_sdk.export(BranchReader())
