"""A test agent with a bug: asked to divide by zero, it does, and the
exception escapes ``decide``. It prints every trigger it decides to stdout,
and otherwise takes the engine's proposal."""

import subs_sdk
from subs_sdk import ClientMessages, DecisionRequest, DecisionResponse


class Faulty(subs_sdk.Agent):
    def decide(self, request: DecisionRequest, cx: subs_sdk.Context) -> DecisionResponse:
        trigger = request.trigger
        print(f"faulty agent deciding {trigger.kind}")
        if isinstance(trigger, ClientMessages) and any("divide by zero" in m.text() for m in trigger.messages):
            return 1 / 0
        return request.proposed


WitWorld = subs_sdk.export(Faulty())
