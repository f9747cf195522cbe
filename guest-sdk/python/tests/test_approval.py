"""Approvals, tool contexts, sub-agents as tools and the builders: the same
rules as the Rust SDK's `ToolRouter::handle` and its builders."""

import dataclasses
import unittest
from typing import Any, Dict, List, Optional

import tests.support  # noqa: F401  (paths)

from subs_sdk import (
    Action,
    Agent,
    AgentConfig,
    Call,
    Context,
    DecisionRequest,
    DecisionResponse,
    DraftMessage,
    InterruptResumed,
    RecordingHost,
    SessionStart,
    SubAgentSpawn,
    ToolContext,
    ToolError,
    ToolExecute,
    ToolRouter,
    approval_answer_schema,
    parse_json,
    to_json,
    tool,
    tool_execute,
    valid_id,
)


@dataclasses.dataclass
class Counts:
    count: int = 0


#: How many times the refund's body ran, across all tests of one router.
RAN: List[str] = []


def router() -> ToolRouter:
    r = ToolRouter()

    @r.tool
    def lookup() -> str:
        return "found"

    @r.tool(needs_approval=True)
    def refund(amount: int, cx: ToolContext[Counts]) -> Dict[str, Any]:
        RAN.append(cx.call_id)
        cx.state.count += 1
        cx.info(f"refunding {amount}")
        return {"refunded": amount, "by": cx.identity.id}

    @r.tool(needs_approval=lambda args: args["amount"] > 10)
    def note(amount: int) -> str:
        return "noted"

    return r


def call(id: str, name: str, arguments: Any) -> Action:
    return Action.tool_call(name, arguments, id=id)


def proposing(actions: List[Action]) -> DecisionRequest:
    return DecisionRequest(trigger=SessionStart(), proposed=DecisionResponse(actions=actions))


def resumed(id: str, tool_name: str, payload: Any, status: str = "queued") -> DecisionRequest:
    request = DecisionRequest(trigger=InterruptResumed(interrupt_id=id, payload=payload))
    request.calls.append(Call(id=id, kind="tool_call", status=status, attempt=1, name=tool_name, arguments="{}"))  # type: ignore[arg-type]
    return request


def execute(id: str, arguments: str, state: Any = None) -> DecisionRequest:
    return DecisionRequest(trigger=tool_execute("refund", arguments, id=id), state=state)


def decide(request: DecisionRequest, host: Optional[RecordingHost] = None) -> DecisionResponse:
    return router().handle(request, Context(host or RecordingHost()))


class Gate(unittest.TestCase):
    def test_each_gated_call_gets_its_own_approval_and_others_none(self):
        decision = decide(proposing([
            call("c1", "refund", {"amount": 5}),
            call("c2", "lookup", {}),
            call("c3", "refund", {"amount": 7}),
            call("c4", "note", {"amount": 3}),
            call("c5", "note", {"amount": 30}),
        ]))
        self.assertEqual(decision.actions, [
            call("c1", "refund", {"amount": 5}),
            Action.approval("c1", "refund", {"amount": 5}),
            call("c2", "lookup", {}),
            call("c3", "refund", {"amount": 7}),
            Action.approval("c3", "refund", {"amount": 7}),
            call("c4", "note", {"amount": 3}),
            call("c5", "note", {"amount": 30}),
            Action.approval("c5", "note", {"amount": 30}),
        ])

    def test_the_approval_names_tool_call_and_arguments_with_its_answers_schema(self):
        wire = parse_json(to_json(Action.approval("c1", "refund", {"amount": 5})))
        self.assertEqual(wire, {
            "type": "interrupt", "interrupt_id": "c1", "reason": "approve refund",
            "payload": {"tool": "refund", "call_id": "c1", "arguments": {"amount": 5}},
            "resume_schema": approval_answer_schema(),
        })

    def test_ungated_proposals_pass_unchanged_and_calls_without_ids_get_one(self):
        request = proposing([call("c2", "lookup", {}), Action.llm_call()])
        self.assertEqual(decide(request), request.proposed)
        decision = decide(proposing([Action.tool_call("refund", {"amount": 1})]))
        assert decision.actions is not None
        self.assertEqual(decision.actions[1], Action.approval("approve.decision.0", "refund", {"amount": 1}))
        self.assertEqual(decision.actions[0].id, "approve.decision.0")

    def test_arguments_a_gate_cannot_read_need_approval(self):
        self.assertTrue(router().needs_approval_for("note", {"amount": "lots"}))
        self.assertTrue(router().needs_approval_for("note", {}))
        self.assertFalse(router().needs_approval_for("note", {"amount": 1}))
        self.assertFalse(router().needs_approval_for("lookup", {}))


class Answers(unittest.TestCase):
    def setUp(self):
        RAN.clear()

    def test_an_approval_is_recorded_for_the_calls_execution(self):
        decision = decide(resumed("c1", "refund", {"approved": True}))
        self.assertIsNone(decision.actions)
        self.assertEqual(decision.state, {"subs_approvals": {"c1": True}})

        request = execute("c1", '{"amount": 5}', {"count": 1, "subs_approvals": {"c1": True, "c9": "later"}})
        decision = decide(request)
        self.assertEqual(decision.actions, [Action.tool_result({"refunded": 5, "by": None})])
        self.assertEqual(decision.state, {"count": 2, "subs_approvals": {"c9": "later"}}, "the answer is used up")
        self.assertEqual(RAN, ["c1"])

    def test_a_gated_call_without_a_recorded_approval_never_runs(self):
        for state in [None, {"count": 1}, {"subs_approvals": {"c2": True}}, [1]]:
            decision = decide(execute("c1", '{"amount": 5}', state))
            self.assertEqual(decision.actions,
                             [Action.tool_error("denied by the approver: no approval of this call was recorded")],
                             state)
        self.assertEqual(RAN, [], "the refund's body never ran")
        # A call its gate let through runs without one.
        decision = decide(DecisionRequest(trigger=tool_execute("note", '{"amount": 1}')))
        self.assertEqual(decision.actions, [Action.tool_result("noted")])

    def test_a_denial_settles_the_call_with_its_reason(self):
        host = RecordingHost()
        decision = decide(resumed("c1", "refund", {"approved": False, "reason": "too much"}, "pending"), host)
        self.assertEqual(decision.actions, [ToolError(id="c1", error="denied by the approver: too much")])
        self.assertIsNone(decision.state)
        self.assertIn("the call `c1` of `refund` was denied: too much", [m for _, m in host.logs])

    def test_a_denial_of_a_call_still_held_waits_for_its_execution(self):
        decision = decide(resumed("c1", "refund", {"approved": False, "reason": "too much"}))
        self.assertIsNone(decision.actions)
        self.assertEqual(decision.state, {"subs_approvals": {"c1": "too much"}})
        decision = decide(execute("c1", '{"amount": 5}', decision.state))
        self.assertEqual(decision.actions, [Action.tool_error("denied by the approver: too much")])
        self.assertEqual(decision.state, {}, "a null state would keep the answer")
        self.assertEqual(RAN, [])

    def test_anything_but_an_approval_denies(self):
        for payload in [None, "yes", {"approved": "true"}, {"aproved": True}]:
            decision = decide(resumed("c1", "refund", payload, "pending"))
            assert decision.actions is not None
            error = decision.actions[0]
            assert isinstance(error, ToolError), payload
            self.assertIn('not {"approved": true|false}', error.error)

    def test_other_interrupts_are_the_agents_own(self):
        request = resumed("c1", "refund", {"approved": False})
        request.calls.clear()
        self.assertTrue(decide(request).is_empty())
        self.assertTrue(decide(resumed("c1", "lookup", {"approved": False})).is_empty())
        self.assertTrue(decide(resumed("c1", "refund", {"approved": False}, "completed")).is_empty())


class Contexts(unittest.TestCase):
    def test_tools_read_and_write_typed_state_and_see_the_owner(self):
        request = execute("c1", '{"amount": 5}', {"subs_approvals": {"c1": True}})
        request.identity.id = "ann"
        host = RecordingHost()
        decision = decide(request, host)
        self.assertEqual(decision.actions, [Action.tool_result({"refunded": 5, "by": "ann"})])
        self.assertEqual(decision.state, {"count": 1})
        self.assertIn("refunding 5", [m for _, m in host.logs])
        request.state = {"count": 4, "subs_approvals": {"c1": True}}
        self.assertEqual(decide(request).state, {"count": 5})
        # A tool that does not change the state leaves it out.
        self.assertIsNone(decide(DecisionRequest(trigger=tool_execute("lookup", "{}"))).state)

    def test_a_state_of_another_shape_is_a_tool_error_naming_the_field(self):
        decision = decide(execute("c1", '{"amount": 5}', {"count": "many", "subs_approvals": {"c1": True}}))
        assert decision.actions is not None
        error = decision.actions[0]
        assert isinstance(error, ToolError)
        self.assertTrue(
            error.error.startswith("the session state does not fit the state of `refund`: state.count:"), error.error)
        self.assertEqual(decision.state, {"count": "many"}, "the approval is used up")

    def test_state_changes_are_kept_when_the_tool_fails(self):
        @tool
        def bump(cx: ToolContext[Dict[str, int]]) -> None:
            cx.state["n"] = cx.state.get("n", 0) + 1
            raise ValueError("broke after counting")

        decision = ToolRouter([bump]).handle(DecisionRequest(trigger=tool_execute("bump", "{}")), Context(RecordingHost()))
        self.assertEqual(decision.actions, [Action.tool_error("broke after counting")])
        self.assertEqual(decision.state, {"n": 1})

    def test_the_context_is_not_part_of_the_schema(self):
        schema = router().get("refund")
        assert schema is not None
        self.assertEqual(schema.input, {"type": "object", "properties": {"amount": {"type": "integer"}},
                                        "required": ["amount"], "additionalProperties": False})

    def test_execute_alone_gives_a_null_state_and_drops_its_changes(self):
        RAN.clear()
        call = tool_execute("refund", '{"amount": 2}', id="c3")
        self.assertEqual(router().execute(call), Action.tool_result({"refunded": 2, "by": None}))

    def test_the_router_is_an_agents_whole_decision(self):
        class Approver(Agent):
            def __init__(self) -> None:
                self.router = router()

            def decide(self, request: DecisionRequest, cx: Context) -> DecisionResponse:
                return self.router.handle(request, cx)

        out = RecordingHost().decide_json(Approver(), to_json(proposing([call("c1", "refund", {"amount": 5})])))
        self.assertEqual([a["type"] for a in out["actions"]], ["tool.call", "interrupt"])


class Delegation(unittest.TestCase):
    def test_sub_agents_are_declared_with_the_tools(self):
        config = router().sub_agent("summarizer", "Summarizes a text").configure(AgentConfig(model="m"))
        self.assertEqual([t.name for t in config.tools or []], ["lookup", "refund", "note"])
        assert config.sub_agents is not None
        self.assertEqual((config.sub_agents[0].id, config.sub_agents[0].description),
                         ("summarizer", "Summarizes a text"))

    def test_delegate_records_the_call_and_its_spawn_together(self):
        request = DecisionRequest(trigger=SessionStart(), session_id="s1", decision_id="d1")
        decision = DecisionResponse().delegate(request, "summarizer", "Summarize: the order shipped.")
        assert decision.messages is not None and decision.actions is not None
        message = decision.messages[0]
        self.assertEqual(message.role, "assistant")
        assert message.tool_calls is not None
        c = message.tool_calls[0]
        self.assertEqual((c.id, c.function.name, c.function.arguments),
                         ("delegate.d1.1", "summarizer", "Summarize: the order shipped."))
        self.assertEqual(decision.actions, [Action.spawn("s1.delegate.d1.1", "summarizer", "delegate.d1.1")])
        # A second delegation in one decision gets ids of its own.
        decision.delegate(request, "translator", "Bonjour")
        spawn = decision.actions[1]
        assert isinstance(spawn, SubAgentSpawn)
        self.assertEqual(spawn.tool_call_id, "delegate.d1.2")
        # The wire form is what the engine reads.
        wire = parse_json(to_json(decision))
        self.assertEqual(wire["messages"][0]["tool_calls"][0]["function"]["arguments"],
                         "Summarize: the order shipped.")

    def test_ids_that_would_outgrow_an_id_stay_valid_and_stable(self):
        request = DecisionRequest(trigger=SessionStart(), session_id="s" * 250, decision_id="d" * 250)
        first = DecisionResponse().delegate(request, "a", "x")
        again = DecisionResponse().delegate(request, "a", "x")
        self.assertEqual(first, again)
        assert first.actions is not None
        spawn = first.actions[0]
        assert isinstance(spawn, SubAgentSpawn)
        self.assertTrue(valid_id(spawn.session_id) and valid_id(spawn.tool_call_id))
        self.assertTrue(spawn.tool_call_id.startswith("delegate."))

    def test_replace_actions_keeps_the_rest_of_the_proposal(self):
        proposed = DecisionResponse().with_message(DraftMessage.user("hi")).with_action(Action.llm_call())
        decision = proposed.replace_actions([Action.done()])
        self.assertEqual((len(decision.messages or []), decision.actions), (1, [Action.done()]))
        self.assertIsNone(DecisionResponse(actions=[Action.done()]).replace_actions([]).actions)


if __name__ == "__main__":
    unittest.main()
