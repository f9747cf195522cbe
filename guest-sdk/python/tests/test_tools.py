import dataclasses
import enum
import unittest
from typing import Annotated, Any, Dict, List, Literal, Optional, TypedDict

import tests.support  # noqa: F401  (paths)

from subs_sdk import Action, DecideError, DecisionRequest, InvalidInput, SessionStart, ToolExecute
from subs_sdk import ToolRouter, schema_of, tool, tool_execute, to_json


class Sum(TypedDict):
    sum: float


@tool(description="adds")
def add(a: float, b: float) -> Sum:
    return {"sum": a + b}


@tool
def who(call: ToolExecute) -> Dict[str, Any]:
    return {"id": call.id, "attempt": call.attempt}


@tool
def fail() -> None:
    raise ValueError("it broke")


def router() -> ToolRouter:
    return ToolRouter([add, who, fail])


class Router(unittest.TestCase):
    def test_valid_input_runs_the_tool(self):
        self.assertEqual(router().execute(tool_execute("add", '{"a": 1, "b": 2.5}')),
                         Action.tool_result({"sum": 3.5}))

    def test_tools_can_see_the_call(self):
        call = tool_execute("who", "{}", id="c7", attempt=2)
        self.assertEqual(router().execute(call), Action.tool_result({"id": "c7", "attempt": 2}))

    def test_exceptions_become_tool_errors(self):
        self.assertEqual(router().execute(tool_execute("fail", "{}")), Action.tool_error("it broke"))

    def test_decide_errors_fail_the_decision(self):
        @tool
        def strict() -> None:
            raise DecideError("the service is down", retryable=True)

        with self.assertRaises(DecideError):
            ToolRouter([strict]).execute(tool_execute("strict", "{}"))

    def test_arguments_of_the_wrong_shape_name_the_field(self):
        action = router().execute(tool_execute("add", '{"a": 1, "b": "2"}'))
        self.assertEqual(action.error, 'invalid arguments for `add`: b: invalid type: string "2", expected f64')
        self.assertIsNone(action.retryable)
        self.assertEqual(router().execute(tool_execute("add", '{"a": 1}')).error,
                         "invalid arguments for `add`: missing field `b`")
        self.assertEqual(router().execute(tool_execute("add", '{"a": true, "b": 1}')).error,
                         "invalid arguments for `add`: a: invalid type: boolean `true`, expected f64")

    def test_invalid_and_malformed_input_never_reach_the_tool(self):
        call = tool_execute("add", '{"a": 1, "b": 2}')
        call.input = InvalidInput(value={"a": 1, "b": 2}, error="additional property `c`")
        self.assertEqual(router().execute(call),
                         Action.tool_error("invalid arguments for `add`: additional property `c`"))
        self.assertEqual(router().execute(tool_execute("add", "[]")),
                         Action.tool_error("malformed arguments for `add`: the arguments are not a JSON object"))
        self.assertTrue(router().execute(tool_execute("add", "{")).error.startswith("malformed arguments for `add`: "))

    def test_unknown_tools_are_named_with_the_known_ones(self):
        self.assertEqual(router().execute(tool_execute("mul", "{}")),
                         Action.tool_error("unknown tool `mul`: this agent runs `add`, `who`, `fail`"))
        self.assertEqual(ToolRouter().execute(tool_execute("mul", "{}")),
                         Action.tool_error("unknown tool `mul`: this agent runs no tools"))

    def test_tools_are_listed_in_order(self):
        r = router()
        self.assertEqual([t.name for t in r.tools()], ["add", "who", "fail"])
        self.assertEqual(r.get("add").description, "adds")
        self.assertTrue(r.handles("who"))
        self.assertFalse(r.handles("mul"))
        self.assertEqual(repr(r), "ToolRouter(tools=['add', 'who', 'fail'])")

    def test_decide_answers_only_tool_execute(self):
        r = router()
        self.assertIsNone(r.decide(DecisionRequest(trigger=SessionStart())))
        decision = r.decide(DecisionRequest(trigger=tool_execute("fail", "{}")))
        self.assertEqual(decision.actions, [Action.tool_error("it broke")])

    def test_duplicate_names_are_refused(self):
        with self.assertRaisesRegex(ValueError, "the tool `add` was added to the ToolRouter twice"):
            router().add(add)

    def test_results_that_are_not_json_are_tool_errors(self):
        @tool
        def nan() -> float:
            return float("nan")

        action = ToolRouter([nan]).execute(tool_execute("nan", "{}"))
        self.assertTrue(action.error.startswith("the result of `nan` is not JSON: "), action.error)

    def test_router_decorator_adds_the_tool(self):
        r = ToolRouter()

        @r.tool(name="shout", description="Upper-cases a text")
        def _shout(text: str) -> str:
            if not text:
                raise ValueError("nothing to shout")
            return text.upper()

        self.assertEqual(r.execute(tool_execute("shout", '{"text": "hi"}')), Action.tool_result("HI"))
        self.assertEqual(r.execute(tool_execute("shout", '{"text": ""}')), Action.tool_error("nothing to shout"))
        self.assertEqual(r.execute(tool_execute("shout", '{"txt": "hi"}')),
                         Action.tool_error("invalid arguments for `shout`: missing field `text`"))
        self.assertEqual(_shout("a"), "A")


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


@dataclasses.dataclass
class Point:
    x: float
    y: float = 0.0


class Options(TypedDict, total=False):
    verbose: bool


def loose_tool():
    @tool(input={"type": "object"})
    def loose(**kwargs: Any) -> dict:
        return kwargs

    return loose


class Schemas(unittest.TestCase):
    def test_type_hints_give_the_schemas(self):
        @tool
        def everything(
            a: Annotated[float, "The first addend"],
            n: Annotated[int, {"minimum": 0}],
            s: str,
            flag: bool,
            items: List[str],
            maybe: Optional[int],
            mode: Literal["fast", "slow"],
            color: Color,
            point: Point,
            options: Options,
            anything: Any,
            labels: Dict[str, int],
            tail: str = "x",
        ) -> Point:
            """Does it all.

            Really."""
            return point

        d = everything.declaration
        self.assertEqual(d.description, "Does it all.\n\nReally.")
        self.assertEqual(to_json(d.input), to_json({
            "type": "object",
            "properties": {
                "a": {"type": "number", "description": "The first addend"},
                "n": {"type": "integer", "minimum": 0},
                "s": {"type": "string"},
                "flag": {"type": "boolean"},
                "items": {"type": "array", "items": {"type": "string"}},
                "maybe": {"type": ["integer", "null"]},
                "mode": {"type": "string", "enum": ["fast", "slow"]},
                "color": {"enum": ["red", "blue"]},
                "point": {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
                          "required": ["x"], "additionalProperties": False},
                "options": {"type": "object", "properties": {"verbose": {"type": "boolean"}},
                            "additionalProperties": False},
                "anything": {},
                "labels": {"type": "object", "additionalProperties": {"type": "integer"}},
                "tail": {"type": "string"},
            },
            "required": ["a", "n", "s", "flag", "items", "maybe", "mode", "color", "point", "options", "anything",
                         "labels"],
            "additionalProperties": False,
        }))
        self.assertEqual(d.output["required"], ["x"])

    def test_arguments_are_converted_to_the_hinted_types(self):
        seen = {}

        @tool
        def typed(point: Point, color: Color, maybe: Optional[int] = None, items: List[float] = ()) -> None:
            seen.update(point=point, color=color, maybe=maybe, items=items)

        r = ToolRouter([typed])
        action = r.execute(tool_execute("typed", '{"point": {"x": 1}, "color": "red", "items": [1, 2.5]}'))
        self.assertEqual(action, Action.tool_result(None))
        self.assertEqual(seen, {"point": Point(x=1.0), "color": Color.RED, "maybe": None, "items": [1.0, 2.5]})
        self.assertEqual(r.execute(tool_execute("typed", '{"point": {"y": 1}, "color": "red"}')).error,
                         "invalid arguments for `typed`: point: missing field `x`")
        self.assertEqual(r.execute(tool_execute("typed", '{"point": {"x": 1}, "color": "green"}')).error,
                         'invalid arguments for `typed`: color: unknown variant "green", expected one of `red`, `blue`')
        self.assertEqual(r.execute(tool_execute("typed", '{"point": {"x": 1}, "color": "red", "items": [1, "2"]}')).error,
                         'invalid arguments for `typed`: items[1]: invalid type: string "2", expected f64')

    def test_explicit_schemas_win(self):
        @tool(input={"type": "object"}, output={"type": "string"})
        def loose(**kwargs: Any) -> dict:
            return kwargs

        self.assertEqual(loose.declaration.input, {"type": "object"})
        self.assertEqual(loose.declaration.output, {"type": "string"})

    def test_dict_results_have_no_output_schema(self):
        @tool
        def free() -> dict:
            return {}

        self.assertIsNone(free.declaration.output)
        self.assertEqual(schema_of(Optional[Point])["type"], ["object", "null"])
        self.assertEqual(schema_of(Optional[Any]), {"anyOf": [{}, {"type": "null"}]})
        self.assertEqual(ToolRouter([loose_tool()]).execute(tool_execute("loose", '{"a": 1}')),
                         Action.tool_result({"a": 1}))


if __name__ == "__main__":
    unittest.main()
