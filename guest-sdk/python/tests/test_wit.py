"""The protocol <-> WIT mapping, against the componentize-py bindings in
tests/bindings (what every component has inside)."""

import unittest

from tests.support import FIXTURES, canonical, fixtures, request_json
from tests.test_protocol import TYPES

from componentize_py_types import Err
from wit_world.imports import subs_agent_types as w

from subs_sdk import protocol as p
from subs_sdk import wit
from subs_sdk.agent import Agent, DecideError
from subs_sdk.component import decide_wit
from subs_sdk.testing import RecordingHost


def round_trip(tp, value):
    return wit.from_wit(tp, wit.to_wit(value, w))


class RoundTrip(unittest.TestCase):
    @unittest.skipUnless(FIXTURES.is_dir(), "the repository's fixtures are not here")
    def test_every_fixture_crosses_unchanged(self):
        crossed = 0
        for type_dir, name, text in fixtures():
            tp = TYPES[type_dir]
            # Enums and content cross inside records; a tree crosses only inside
            # a request, folded against its messages; a stream frame's payload
            # never crosses.
            if not isinstance(tp, type) or tp in (p.MessageTree, p.ToolProgress):
                continue
            with self.subTest(fixture=f"{type_dir}/{name}"):
                value = p.from_json(tp, text)
                back = round_trip(tp, value)
                self.assertEqual(canonical(p.to_value(back)), canonical(p.to_value(value)))
                crossed += 1
        self.assertGreater(crossed, 80)

    def test_records_enums_and_variants_are_the_generated_types(self):
        request = p.DecisionRequest(
            trigger=p.ToolExecute(id="c", name="add", arguments="{}", input=p.ValidInput(value={})),
            identity=p.WorkerIdentity(metadata={"plan": "free"}),
            calls=[p.Call(id="c", kind="tool_call", status="retry_scheduled", attempt=2)],
            messages=[p.Message(id="m1", role="user", content="hi", tool_calls=[p.ToolCall.of("t", "add", "{}")])],
        )
        v = wit.to_wit(request, w)
        self.assertIsInstance(v, w.DecisionRequest)
        self.assertEqual(v.trigger, w.Trigger_ToolExecute(w.ToolExecute(
            id="c", name="add", arguments="{}", input=w.ToolInput_Valid("{}"), attempt=1, deadline=None)))
        self.assertEqual(v.identity.metadata, [("plan", "free")])
        self.assertEqual(v.calls[0].status, w.CallStatus.RETRY_SCHEDULED)
        self.assertEqual(v.messages[0].content, w.Content_Text("hi"))
        self.assertEqual(v.messages[0].tool_calls[0].kind, "function")
        self.assertEqual(v.state, "null")
        self.assertEqual(wit.from_wit(p.DecisionRequest, v), request)

    def test_actions_map_to_their_cases(self):
        decision = p.DecisionResponse(actions=[
            p.Action.tool_error("no"), p.Action.llm_error("no"), p.Action.tool_call("t", [1]), p.Action.done(),
        ], state={"n": 1})
        v = wit.to_wit(decision, w)
        self.assertEqual([type(a).__name__ for a in v.actions],
                         ["Action_ToolError", "Action_LlmError", "Action_ToolCall", "Action_Done"])
        self.assertIsInstance(v.actions[2].value, w.ToolCallAction)
        self.assertEqual(v.actions[2].value.arguments, "[1]")
        self.assertEqual(v.state, '{"n":1}')
        self.assertEqual(wit.from_wit(p.DecisionResponse, v), decision)


class Tree(unittest.TestCase):
    def tree_request(self):
        m1 = p.Message(id="m1", role="user", content="hi")
        m2 = p.Message(id="m2", role="assistant", content="hello")
        old = p.Message(id="m0", role="assistant", content="an older branch")
        tree = p.MessageTree(nodes=[
            p.TreeNode(message=m1),
            p.TreeNode(message=old, parent_id="m1"),
            p.TreeNode(message=m2, parent_id="m1"),
            p.TreeNode(message=p.Message(id="x", role="user"), parent_id="gone"),
        ], head_id="m2")
        return p.DecisionRequest(trigger=p.SessionStart(), messages=[m1, m2], message_tree=tree)

    def test_the_active_path_is_not_repeated(self):
        request = self.tree_request()
        v = wit.to_wit(request, w).message_tree
        self.assertEqual([type(n.message).__name__ for n in v.nodes],
                         ["TreeMessage_Active", "TreeMessage_Other", "TreeMessage_Active", "TreeMessage_Other"])
        self.assertEqual([n.message.value for n in v.nodes if type(n.message).__name__ == "TreeMessage_Active"],
                         [0, 1])
        self.assertEqual(v.nodes[0].parent, w.TreeParent_Root())
        self.assertEqual(v.nodes[1].parent, w.TreeParent_Node(0))
        self.assertEqual(v.nodes[3].parent, w.TreeParent_Id("gone"))
        self.assertEqual(v.head_id, "m2")
        self.assertEqual(round_trip(p.DecisionRequest, request), request)

    def test_indexes_that_point_nowhere_name_the_node(self):
        v = wit.to_wit(self.tree_request(), w)
        v.message_tree.nodes[2].message = w.TreeMessage_Active(7)
        with self.assertRaises(p.ProtocolError) as e:
            wit.from_wit(p.DecisionRequest, v)
        self.assertEqual(str(e.exception), "message_tree.nodes[2].message: refers to message 7, which does not exist")
        v = wit.to_wit(self.tree_request(), w)
        v.message_tree.nodes[1].parent = w.TreeParent_Node(1)
        with self.assertRaises(p.ProtocolError) as e:
            wit.from_wit(p.DecisionRequest, v)
        self.assertEqual(str(e.exception),
                         "message_tree.nodes[1].parent: refers to an earlier node 1, which does not exist")


class Bodies(unittest.TestCase):
    def test_standard_llm_requests_cross_typed(self):
        call = p.LlmExecute(id="l", request={"model": "m", "messages": [{"role": "user", "content": "hi"}],
                                             "temperature": 0.5})
        v = wit.to_wit(call, w)
        self.assertIsInstance(v.value.request, w.LlmRequestBody_Standard)
        self.assertEqual(round_trip(p.Trigger, call), call)

    def test_anything_the_typed_form_cannot_hold_crosses_native(self):
        for request, format in [
            ({"model": "m", "messages": [], "max_tokens": 5}, None),  # an unknown field
            ({"model": "m", "messages": [], "temperature": 1.0}, None),  # 1.0 would come back as 1
            ({"model": "m", "messages": []}, "anthropic"),  # a native format
        ]:
            with self.subTest(request=request):
                call = p.LlmExecute(id="l", request=request, format=format)
                v = wit.to_wit(call, w)
                self.assertIsInstance(v.value.request, w.LlmRequestBody_Native)
                self.assertEqual(canonical(round_trip(p.Trigger, call).request), canonical(request))
        result = p.Action.llm_result({"model": "m", "content": "hi", "usage": {"total_tokens": 3}})
        self.assertIsInstance(wit.to_wit(result, w).value.response, w.LlmResponseBody_Standard)
        native = p.Action.llm_result({"id": "msg_1", "content": [{"type": "text", "text": "hi"}]})
        self.assertIsInstance(wit.to_wit(native, w).value.response, w.LlmResponseBody_Native)

    def test_json_text_that_does_not_parse_names_the_field(self):
        v = wit.to_wit(p.DecisionResponse(actions=[p.Action.done({"a": 1})]), w)
        v.actions[0].value.data = "{nope"
        with self.assertRaises(p.ProtocolError) as e:
            wit.from_wit(p.DecisionResponse, v)
        self.assertTrue(str(e.exception).startswith("actions[0].data: invalid JSON text:"), str(e.exception))


class Echo(Agent):
    def decide(self, request, cx):
        cx.info(request.trigger.kind)
        cx.emit_text("streamed")
        if request.state == "fail":
            raise DecideError("asked to fail", retryable=True)
        if request.state == "bug":
            raise KeyError("x")
        if request.state == "divide":
            return 1 / 0
        if request.state == "garbage":
            return p.DecisionResponse(actions=[p.ToolResult(result=float("nan"))])
        return request.proposed.with_message(p.DraftMessage.assistant("hello")).with_action(
            p.Action.done_with({"state": request.state}))


def wit_request(state):
    request = p.DecisionRequest(trigger=p.SessionStart(), state=state,
                                proposed=p.DecisionResponse(agent=p.AgentConfig(model="m/x")))
    return wit.to_wit(request, w)


class DecideWit(unittest.TestCase):
    def test_a_decision_crosses_the_boundary_both_ways(self):
        host = RecordingHost()
        decision = wit.from_wit(p.DecisionResponse, decide_wit(Echo(), wit_request({"n": 1.5}), host, w))
        self.assertEqual(decision, p.DecisionResponse(
            agent=p.AgentConfig(model="m/x"),
            messages=[p.DraftMessage.assistant("hello")],
            actions=[p.Done(data={"state": {"n": 1.5}})],
        ))
        self.assertEqual(host.logs, [("info", "session.start")])
        self.assertEqual(host.text(), "streamed")

    def test_errors_become_decide_errors(self):
        cases = [
            ("fail", RecordingHost(), w.DecideError(message="asked to fail", retryable=True)),
            ("bug", RecordingHost(), w.DecideError(message="KeyError: 'x'", retryable=False)),
            # The traceback's last line, as Python prints it.
            ("divide", RecordingHost(), w.DecideError(message="ZeroDivisionError: division by zero", retryable=False)),
            (None, RecordingHost.refusing_deltas(), w.DecideError(message=RecordingHost.REFUSAL, retryable=False)),
            ("garbage", RecordingHost(), w.DecideError(
                message="the decision is not valid protocol: actions[0].result: not JSON: "
                        "Out of range float values are not JSON compliant", retryable=False)),
        ]
        for state, host, error in cases:
            with self.subTest(state=state):
                with self.assertRaises(Err) as e:
                    import contextlib
                    import io
                    with contextlib.redirect_stderr(io.StringIO()):
                        decide_wit(Echo(), wit_request(state), host, w)
                self.assertEqual(e.exception.value, error)

    def test_unreadable_requests_fail_terminally_naming_the_field(self):
        request = wit_request(None)
        request.state = "{not json"
        with self.assertRaises(Err) as e:
            decide_wit(Echo(), request, RecordingHost(), w)
        self.assertFalse(e.exception.value.retryable)
        self.assertTrue(e.exception.value.message.startswith(
            "the engine sent a request the agent cannot read: state: invalid JSON text:"), e.exception.value.message)

    def test_export_makes_the_class_componentize_py_calls(self):
        from subs_sdk import export

        world = export(Echo())
        self.assertEqual(world.__name__, "WitWorld")
        self.assertTrue(callable(world().decide))
        with self.assertRaises(TypeError):
            export(Echo)

    def test_requests_from_json_cross_too(self):
        request = p.from_json(p.DecisionRequest, request_json({"type": "session.start"}, state={"a": [1, 2.5]}))
        self.assertEqual(round_trip(p.DecisionRequest, request), request)


if __name__ == "__main__":
    unittest.main()
