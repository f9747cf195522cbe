"""The agent, natively: the cases of the Rust example's tests
(examples/tools/src/lib.rs), run with plain CPython."""

import json
import sys
import time
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
try:
    import subs_sdk  # noqa: F401  (installed with pip)
except ImportError:  # or straight from the repository
    sys.path.insert(0, str(HERE.parents[2] / "guest-sdk" / "python" / "src"))

from subs_sdk import (  # noqa: E402
    Action, AgentConfig, DecisionRequest, DecisionResponse, DraftMessage, InvalidInput, RecordingHost, SessionStart,
    ToolError, ToolFinished, ToolResult, to_json, tool_execute,
)

import tools_agent  # noqa: E402
from tools_agent import DEFAULT_MODEL, SYSTEM_PROMPT, Tools  # noqa: E402

# The config the Rust agent declares for the model `subs/offline`, as the
# engine records it: the Python agent must declare the same, byte for byte.
RUST_CONFIG = (
    '{"model":"subs/offline","system":"You are a helpful assistant. For arithmetic, call the `add` tool instead '
    'of computing sums yourself. For the current date or time, call `get_time`, which returns Unix time in '
    'milliseconds.","tools":[{"name":"add","description":"Adds two numbers and returns their sum.","input":'
    '{"type":"object","properties":{"a":{"type":"number","description":"The first addend"},"b":{"type":"number",'
    '"description":"The second addend"}},"required":["a","b"],"additionalProperties":false},"output":{"type":'
    '"object","properties":{"sum":{"type":"number"}},"required":["sum"],"additionalProperties":false}},{"name":'
    '"get_time","description":"Returns the current time as Unix time in milliseconds.","input":{"type":"object",'
    '"properties":{},"additionalProperties":false},"output":{"type":"object","properties":{"unix_ms":{"type":'
    '"integer","minimum":0}},"required":["unix_ms"],"additionalProperties":false}}]}'
)


def decide(request):
    return RecordingHost().decide(Tools(), request)


def execute_call(call):
    decision = decide(DecisionRequest(trigger=call))
    assert decision.actions is not None and len(decision.actions) == 1, decision
    return decision.actions[0]


def execute(name, arguments):
    return execute_call(tool_execute(name, arguments))


class ToolsAgent(unittest.TestCase):
    def test_session_start_declares_the_proposed_model_prompt_and_tools(self):
        request = DecisionRequest(trigger=SessionStart(), proposed=DecisionResponse(agent=AgentConfig(model="subs/offline")))
        agent = decide(request).agent
        self.assertEqual(agent.model, "subs/offline")
        self.assertEqual(agent.system, SYSTEM_PROMPT)
        self.assertEqual([t.name for t in agent.tools], ["add", "get_time"])
        for t in agent.tools:
            self.assertIsNotNone(t.description, t.name)
            self.assertEqual(t.input["type"], "object", t.name)
            self.assertEqual(t.output["type"], "object", t.name)
        self.assertEqual(agent.tools[0].input["required"], ["a", "b"])
        self.assertEqual(agent.tools[1].input["properties"], {})

    def test_the_config_is_the_rust_agents_byte_for_byte(self):
        request = DecisionRequest(trigger=SessionStart(), proposed=DecisionResponse(agent=AgentConfig(model="subs/offline")))
        self.assertEqual(to_json(decide(request).agent), RUST_CONFIG)

    def test_session_start_falls_back_to_the_config_then_the_default_model(self):
        request = DecisionRequest(trigger=SessionStart(), agent=AgentConfig(model="anthropic/claude-sonnet-4-5"))
        self.assertEqual(decide(request).agent.model, "anthropic/claude-sonnet-4-5")
        decision = decide(DecisionRequest(trigger=SessionStart()))
        self.assertEqual(decision.agent.model, DEFAULT_MODEL)
        self.assertIsNone(decision.actions)
        self.assertIsNone(decision.messages)

    def test_add_sums_like_javascript(self):
        self.assertEqual(execute("add", '{"a": 1, "b": 2}'), Action.tool_result({"sum": 3}))
        self.assertEqual(execute("add", '{"a": 0.5, "b": -0.25}'), Action.tool_result({"sum": 0.25}))
        self.assertEqual(to_json(execute("add", '{"a": 1.5, "b": 1.5}')), '{"type":"tool.result","result":{"sum":3}}')

    def test_add_refuses_sums_json_cannot_hold(self):
        action = execute("add", '{"a": 1e308, "b": 1e308}')
        self.assertIsInstance(action, ToolError)
        self.assertIn("too large", action.error)
        self.assertEqual(action.error, f"1{'0' * 308} + 1{'0' * 308} is too large for a JSON number")

    def test_invalid_input_is_a_tool_error_saying_why(self):
        call = tool_execute("add", '{"a": 1}')
        call.input = InvalidInput(value={"a": 1}, error="missing required property `b`")
        self.assertEqual(execute_call(call),
                         Action.tool_error("invalid arguments for `add`: missing required property `b`"))

    def test_input_that_does_not_fit_the_arguments_names_the_field(self):
        action = execute("add", '{"a": 1, "b": "two"}')
        self.assertIsInstance(action, ToolError)
        self.assertTrue(action.error.startswith("invalid arguments for `add`: b: invalid type: string"), action.error)

    def test_malformed_input_is_a_tool_error_saying_why(self):
        action = execute("add", '{"a": 1,')
        self.assertIsInstance(action, ToolError)
        self.assertTrue(action.error.startswith("malformed arguments for `add`: "), action.error)

    def test_get_time_tells_the_current_unix_time(self):
        before = time.time_ns() // 1_000_000
        action = execute("get_time", "{}")
        after = time.time_ns() // 1_000_000
        self.assertIsInstance(action, ToolResult)
        self.assertTrue(before <= action.result["unix_ms"] <= after, action.result)
        self.assertIsInstance(action.result["unix_ms"], int)
        self.assertEqual(len(action.result), 1)

    def test_unknown_tools_are_refused_by_name(self):
        self.assertEqual(execute("mul", "{}"), Action.tool_error("unknown tool `mul`: this agent runs `add`, `get_time`"))

    def test_other_triggers_take_the_proposal(self):
        request = DecisionRequest(
            trigger=ToolFinished(id="call-1", ok=True, name="add", result='{"sum":3}'),
            proposed=DecisionResponse().with_message(DraftMessage.tool("call-1", '{"sum":3}')).with_action(
                Action.llm_call()),
        )
        self.assertEqual(decide(request), request.proposed)

    def test_recorded_requests_replay_as_json(self):
        request = {
            "session_id": "s", "decision_id": "d", "agent_id": "tools-py", "identity": {},
            "trigger": {"type": "tool.execute", "id": "call-9", "name": "add", "arguments": '{"a":2,"b":40}',
                        "input": {"status": "valid", "value": {"a": 2, "b": 40}}, "attempt": 1},
            "proposed": {}, "state": None, "agent": None, "calls": [], "pending_calls": 1, "messages": [],
            "message_tree": {"nodes": []}, "ancestry": [], "attempts": 1, "deadline": None, "turn_id": None,
        }
        decision = RecordingHost().decide_json(Tools(), json.dumps(request))
        self.assertEqual(decision, {"actions": [{"type": "tool.result", "result": {"sum": 42}}]})

    def test_the_module_exports_the_agent(self):
        self.assertEqual(tools_agent.WitWorld.__name__, "WitWorld")


if __name__ == "__main__":
    unittest.main()
