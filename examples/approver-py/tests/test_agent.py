"""The agent's decisions, without the engine: ``python3 -m unittest`` in
the project's directory."""

import os
import sys
import unittest

# The SDK from the subs source tree this example is in.
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "../../../guest-sdk/python/src"))

from subs_sdk import Action, Call, DecisionRequest, DecisionResponse, InterruptResumed, RecordingHost  # noqa: E402
from subs_sdk import LlmFinished, SessionStart, ToolError, tool_execute  # noqa: E402

from agent import App  # noqa: E402


def decide(request: DecisionRequest) -> DecisionResponse:
    return RecordingHost().decide(App(), request)


class AgentTests(unittest.TestCase):
    def test_the_session_starts_with_the_tools_and_the_summarizer(self) -> None:
        decision = decide(DecisionRequest(trigger=SessionStart()))
        assert decision.agent is not None
        self.assertEqual([t.name for t in decision.agent.tools or []], ["lookup_order", "refund"])
        self.assertEqual([s.id for s in decision.agent.sub_agents or []], ["summarizer"])

    def test_a_lookup_answers(self) -> None:
        decision = decide(DecisionRequest(trigger=tool_execute("lookup_order", '{"order_id": "A1"}')))
        self.assertEqual(decision.actions, [Action.tool_result({"order_id": "A1", "status": "shipped"})])
        self.assertIsNone(decision.state)

    def test_a_refund_asks_for_approval(self) -> None:
        call = Action.tool_call("refund", {"order_id": "A1", "amount": 5}, id="c1")
        # The model's reply calls `refund`: the engine proposes the call.
        replied = LlmFinished(id="llm-1", ok=True)
        decision = decide(DecisionRequest(trigger=replied, proposed=DecisionResponse(actions=[call])))
        self.assertEqual(decision.actions, [call, Action.approval("c1", "refund", {"order_id": "A1", "amount": 5})])

    def test_a_denied_refund_never_runs(self) -> None:
        request = DecisionRequest(trigger=InterruptResumed(interrupt_id="c1", payload={"approved": False, "reason": "no"}))
        request.calls.append(Call(id="c1", kind="tool_call", status="pending", attempt=1, name="refund"))
        decision = decide(request)
        self.assertEqual(decision.actions, [ToolError(id="c1", error="denied by the approver: no")])
        self.assertIsNone(decision.state)
        # Without a recorded approval, its execution is denied too.
        run = decide(DecisionRequest(trigger=tool_execute("refund", '{"order_id": "A1", "amount": 5}')))
        assert run.actions is not None
        self.assertIsInstance(run.actions[0], ToolError)

    def test_an_approved_refund_runs_and_counts_in_the_state(self) -> None:
        request = DecisionRequest(trigger=tool_execute("refund", '{"order_id": "A1", "amount": 5}', id="c1"),
                                  state={"refunds": 1, "subs_approvals": {"c1": True}})
        decision = decide(request)
        self.assertEqual(decision.actions, [Action.tool_result({"refunded": 5, "refunds": 2})])
        self.assertEqual(decision.state, {"refunds": 2})


if __name__ == "__main__":
    unittest.main()
