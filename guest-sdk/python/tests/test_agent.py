import json
import unittest

from tests.support import request_json

from subs_sdk import (
    Action, Agent, AgentConfig, Context, DecideError, DecisionRequest, DecisionResponse, DraftMessage, Level,
    MalformedInput, RecordingHost, SessionStart, StreamDelta, ValidInput, tool_execute,
)


class Passthrough(Agent):
    pass


class Greeter(Agent):
    def decide(self, request, cx):
        cx.info(f"trigger {request.trigger.kind}")
        return DecisionResponse().with_message(DraftMessage.assistant("hi")).with_action(Action.done())


class AgentTests(unittest.TestCase):
    def test_an_empty_agent_takes_the_proposal(self):
        request = DecisionRequest(trigger=SessionStart(),
                                  proposed=DecisionResponse(agent=AgentConfig(model="openai/gpt-4o-mini")))
        self.assertEqual(RecordingHost().decide(Passthrough(), request), request.proposed)

    def test_logs_are_recorded_in_order(self):
        host = RecordingHost()
        decision = host.decide(Greeter(), DecisionRequest(trigger=SessionStart()))
        self.assertEqual(decision.actions, [Action.done()])
        self.assertEqual(host.logs, [(Level.INFO, "trigger session.start")])
        cx = Context(host)
        cx.debug("a")
        cx.warn("b")
        cx.error("c")
        cx.trace("d")
        cx.log("info", "e")
        self.assertEqual([level for level, _ in host.logs[1:]], ["debug", "warn", "error", "trace", "info"])
        with self.assertRaises(ValueError):
            cx.log("loud", "x")

    def test_deltas_stream_unless_refused(self):
        host = RecordingHost()
        cx = Context(host)
        cx.emit_text("hel")
        cx.emit_delta(StreamDelta(reasoning="hmm"))
        cx.emit_text("lo")
        self.assertEqual(host.text(), "hello")
        self.assertEqual(len(host.deltas), 3)
        refusing = RecordingHost.refusing_deltas()
        with self.assertRaises(DecideError) as e:
            Context(refusing).emit_text("x")
        self.assertIn("llm.execute", e.exception.message)
        self.assertFalse(e.exception.retryable)
        self.assertEqual(refusing.deltas, [])

    def test_decide_json_takes_and_gives_protocol_json(self):
        request = request_json({"type": "session.start"}, proposed={"agent": {"model": "subs/offline"}})
        host = RecordingHost()
        self.assertEqual(host.decide_json(Passthrough(), request), {"agent": {"model": "subs/offline"}})
        self.assertEqual(host.decide_json(Greeter(), json.dumps(request)),
                         {"messages": [{"role": "assistant", "content": "hi"}], "actions": [{"type": "done"}]})

    def test_decide_errors_compare_by_message_and_retryability(self):
        self.assertEqual(DecideError("x"), DecideError.terminal("x"))
        self.assertNotEqual(DecideError("x"), DecideError.retryable_error("x"))


class ToolExecuteTests(unittest.TestCase):
    def test_arguments_are_judged_like_the_engine_does(self):
        call = tool_execute("t", '{"a": 1}')
        self.assertEqual(call.input, ValidInput(value={"a": 1}))
        self.assertEqual((call.id, call.attempt, call.arguments), ("call-1", 1, '{"a": 1}'))
        self.assertEqual(tool_execute("t", "3").input, MalformedInput(error="the arguments are not a JSON object"))
        self.assertIsInstance(tool_execute("t", "{").input, MalformedInput)


if __name__ == "__main__":
    unittest.main()
