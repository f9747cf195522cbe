import json
import unittest
from typing import List

from tests.support import FIXTURES, canonical, fixtures

from subs_sdk import protocol as p

# The protocol type of each fixture directory (as in engine/protocol/tests/fixtures.rs).
TYPES = {
    "decision_request": p.DecisionRequest,
    "worker_identity": p.WorkerIdentity,
    "call": p.Call,
    "decision_response": p.DecisionResponse,
    "trigger": p.Trigger,
    "tool_input": p.ToolInput,
    "error_code": p.ErrorCode,
    "client_context": p.ClientContext,
    "action": p.Action,
    "agent_config": p.AgentConfig,
    "agent_tool": p.AgentTool,
    "sub_agent": p.SubAgent,
    "retry_policy": p.RetryPolicy,
    "content": p.Content,
    "content_part": p.ContentPart,
    "tool_call": p.ToolCall,
    "message": p.Message,
    "draft_message": p.DraftMessage,
    "message_tree": p.MessageTree,
    "llm_request": p.LlmRequest,
    "llm_tool": p.LlmTool,
    "reasoning_config": p.ReasoningConfig,
    "llm_response": p.LlmResponse,
    "client_input": p.ClientInput,
    "stream_delta": p.StreamDelta,
    "role": p.Role,
    "handler": p.Handler,
    "tool_progress": p.ToolProgress,
}


def write(tp, value):
    """A value of `tp` as JSON values (enums and content are not dataclasses)."""
    return p._encode(tp, value)


class Fixtures(unittest.TestCase):
    @unittest.skipUnless(FIXTURES.is_dir(), "the repository's fixtures are not here")
    def test_every_fixture_round_trips(self):
        checked = 0
        for type_dir, name, text in fixtures():
            with self.subTest(fixture=f"{type_dir}/{name}"):
                tp = TYPES[type_dir]
                value = p.from_json(tp, text)
                self.assertEqual(canonical(write(tp, value)), canonical(json.loads(text)))
                checked += 1
        self.assertGreater(checked, 100)


class Json(unittest.TestCase):
    def test_optional_fields_are_omitted_and_some_written_null(self):
        request = p.DecisionRequest(trigger=p.SessionStart())
        value = p.to_value(request)
        self.assertEqual(list(value), [
            "session_id", "decision_id", "agent_id", "identity", "trigger", "proposed", "state", "agent", "calls",
            "pending_calls", "messages", "message_tree", "ancestry", "attempts", "deadline", "turn_id",
        ])
        self.assertIsNone(value["agent"])
        self.assertIsNone(value["state"])
        self.assertEqual(value["trigger"], {"type": "session.start"})
        self.assertEqual(p.to_json(p.RetryPolicy(max_retries=1)),
                         '{"timeout_secs":null,"max_retries":1,"backoff_base_secs":0,"backoff_max_secs":0}')
        self.assertEqual(p.to_json(p.DecisionResponse()), "{}")

    def test_tags_come_first_and_float_fields_are_written_like_javascript(self):
        action = p.LlmCall(temperature=1.0, retry=p.RetryPolicy(timeout_secs=30.0, backoff_base_secs=0.5))
        self.assertEqual(
            p.to_json(action),
            '{"type":"llm.call","temperature":1,"retry":{"timeout_secs":30,"max_retries":0,'
            '"backoff_base_secs":0.5,"backoff_max_secs":0}}',
        )
        self.assertEqual(p.js_number(3.0), 3)
        self.assertIsInstance(p.js_number(3.0), int)
        self.assertEqual(p.js_number(0.25), 0.25)
        self.assertIsInstance(p.js_number(2.0**60), float)
        with self.assertRaises(ValueError):
            p.js_number(float("inf"))

    def test_values_of_any_json_are_kept_as_they_are(self):
        result = p.from_json(p.Action, '{"type":"tool.result","result":{"x":3.0,"y":3,"z":[true,null]}}')
        self.assertEqual(p.to_json(result), '{"type":"tool.result","result":{"x":3.0,"y":3,"z":[true,null]}}')
        self.assertEqual(p.to_json(p.ToolResult(result=None)), '{"type":"tool.result","result":null}')

    def test_null_is_omitted_for_optional_fields(self):
        done = p.from_json(p.Action, '{"type":"done","data":null}')
        self.assertEqual(done, p.Done())
        self.assertEqual(p.to_json(done), '{"type":"done"}')

    def test_unknown_fields_are_ignored(self):
        config = p.from_json(p.AgentConfig, '{"model":"m","future":1}')
        self.assertEqual(config, p.AgentConfig(model="m"))

    def test_errors_name_the_field(self):
        cases = [
            (p.DecisionResponse, '{"actions":[{"type":"tool.call","name":5}]}',
             'actions[0].name: invalid type: integer `5`, expected a string'),
            (p.DecisionResponse, '{"actions":[{"type":"tool.call","name":"x"}]}',
             'actions[0]: missing field `arguments`'),
            (p.Action, '{"type":"tool.dance"}',
             'type: unknown variant `tool.dance`, expected one of `llm.call`, `tool.call`, `tool.result`, '
             '`tool.error`, `llm.result`, `llm.error`, `sub_agent.spawn`, `message.send`, `interrupt`, `done`'),
            (p.Action, '{"kind":"done"}', 'missing field `type`'),
            (p.Action, '[1]', 'invalid type: an array, expected an object with a `type` field'),
            (p.Message, '{"id":"m","role":"robot"}',
             'role: unknown variant `robot`, expected one of `system`, `user`, `assistant`, `tool`'),
            (p.RetryPolicy, '{"max_retries":-1,"backoff_base_secs":1,"backoff_max_secs":1}',
             'max_retries: invalid value: integer `-1`, expected u32'),
            (p.DraftMessage, '{"role":"user","content":5}',
             'content: invalid type: integer `5`, expected a string or an array of content parts'),
            (p.AgentConfig, '["m"]', 'invalid type: sequence, expected struct AgentConfig'),
            (p.DecisionResponse, '{"state": NaN}', 'invalid JSON: NaN is not JSON'),
        ]
        for tp, text, message in cases:
            with self.subTest(text=text):
                with self.assertRaises(p.ProtocolError) as e:
                    p.from_json(tp, text)
                self.assertEqual(str(e.exception), message)

    def test_lists_of_a_type_parse(self):
        actions = p.from_json(List[p.Action], '[{"type":"done"},{"type":"llm.call"}]')
        self.assertEqual(actions, [p.Done(), p.LlmCall()])

    def test_stream_events_read_session_and_live_frames(self):
        progress = p.from_json(
            p.StreamEvent, '{"event":"tool.progress","data":{"id":"c1","progress":2.5,"total":null,"message":"x"}}'
        )
        self.assertEqual(progress, p.ToolProgressEvent(data=p.ToolProgress(id="c1", progress=2.5, total=None, message="x")))
        self.assertEqual(p.to_json(progress), '{"event":"tool.progress","data":{"id":"c1","progress":2.5,"total":null,"message":"x"}}')
        started = p.from_json(p.StreamEvent, '{"event":"turn.started","data":{"turn_id":"t"}}')
        self.assertEqual(started, p.TurnStartedEvent(data=p.TurnStarted(turn_id="t")))
        with self.assertRaises(p.ProtocolError) as e:
            p.from_json(p.StreamEvent, '{"event":"tool.paused","data":{}}')
        self.assertTrue(str(e.exception).endswith("`state`, `tool.progress`"), str(e.exception))
        with self.assertRaises(p.ProtocolError) as e:
            p.from_json(p.StreamEvent, '{"event":"tool.progress","data":{"id":"c1"}}')
        self.assertEqual(str(e.exception), "data: missing field `progress`")

    def test_non_finite_numbers_are_refused(self):
        with self.assertRaises(ValueError):
            p.to_json(p.ToolResult(result=float("nan")))
        with self.assertRaises(p.ProtocolError) as e:
            p.to_json(p.LlmCall(temperature=float("inf")))
        self.assertEqual(str(e.exception), "temperature: inf is not a JSON number")


class Builders(unittest.TestCase):
    def test_actions_have_the_rust_constructors_names(self):
        self.assertEqual(p.to_json(p.Action.tool_result({"sum": 3})), '{"type":"tool.result","result":{"sum":3}}')
        self.assertEqual(p.to_json(p.Action.tool_error("no")), '{"type":"tool.error","error":"no"}')
        self.assertEqual(p.to_json(p.Action.llm_error("no", retryable=True)),
                         '{"type":"llm.error","error":"no","retryable":true}')
        self.assertEqual(p.to_json(p.Action.done()), '{"type":"done"}')
        self.assertEqual(p.to_json(p.Action.done_with({"ok": True})), '{"type":"done","data":{"ok":true}}')
        self.assertEqual(p.to_json(p.Action.interrupt("approve?", {"x": 1})),
                         '{"type":"interrupt","reason":"approve?","payload":{"x":1}}')
        self.assertEqual(p.to_json(p.Action.llm_call()), '{"type":"llm.call"}')
        self.assertEqual(p.to_json(p.Action.tool_call("add", {"a": 1})),
                         '{"type":"tool.call","name":"add","arguments":{"a":1}}')
        self.assertEqual(p.Action.tool_result({}).kind, "tool.result")

    def test_decisions_chain(self):
        decision = (p.DecisionResponse()
                    .with_message(p.DraftMessage.assistant("hello"))
                    .with_action(p.Action.done())
                    .with_state({"turns": 1}))
        self.assertEqual(
            p.to_json(decision),
            '{"messages":[{"role":"assistant","content":"hello"}],"actions":[{"type":"done"}],"state":{"turns":1}}',
        )
        self.assertFalse(decision.is_empty())
        self.assertTrue(p.DecisionResponse().is_empty())

    def test_messages(self):
        self.assertEqual(p.to_json(p.DraftMessage.tool("c1", "3")),
                         '{"role":"tool","content":"3","tool_call_id":"c1"}')
        parts = p.Message(id="m", role="user", content=[p.TextPart(text="a"), p.ImageUrlPart(
            image_url=p.UrlRef(url="u")), p.TextPart(text="b")])
        self.assertEqual(parts.text(), "a\nb")
        self.assertEqual(p.to_json(p.ToolCall.of("c", "add", "{}")),
                         '{"id":"c","type":"function","function":{"name":"add","arguments":"{}"}}')

    def test_llm_execute_reads_standard_requests(self):
        call = p.LlmExecute(id="l", request={"model": "m", "messages": [{"role": "user", "content": "hi"}]})
        self.assertEqual(call.llm_request().messages, [p.DraftMessage.user("hi")])
        call.format = "anthropic"
        with self.assertRaises(p.ProtocolError):
            call.llm_request()


if __name__ == "__main__":
    unittest.main()
