"""Native unit tests of agents (plain CPython, no WebAssembly):
:class:`RecordingHost`, a host that keeps what the agent logged and
streamed, and :func:`tool_execute` to build the trigger of a tool call.

A recorded request can be replayed as protocol JSON::

    host = RecordingHost()
    decision = host.decide_json(MyAgent(), open("request.json").read())
    assert decision["actions"][0]["type"] == "tool.result"
"""

from typing import Any, Dict, List, Optional, Tuple, Union

from .agent import Agent, Context, Host, Level
from .protocol import (
    DecisionRequest,
    DecisionResponse,
    MalformedInput,
    StreamDelta,
    ToolExecute,
    ToolInput,
    ValidInput,
    from_json,
    parse_json,
    to_json,
)

__all__ = ["RecordingHost", "tool_execute"]


class RecordingHost(Host):
    """A host that records instead of talking to an engine: run a decision
    with :meth:`decide` (protocol types) or :meth:`decide_json` (protocol
    JSON), then look at :attr:`logs` and :attr:`deltas`.

    ``accept_deltas=False`` refuses deltas, as the engine does for a
    decision that does not answer a streaming ``llm.execute``."""

    REFUSAL = "deltas are only accepted while answering an llm.execute trigger with stream: true"

    def __init__(self, accept_deltas: bool = True):
        self.logs: List[Tuple[Level, str]] = []
        self.deltas: List[StreamDelta] = []
        self.accept_deltas = accept_deltas

    @staticmethod
    def refusing_deltas() -> "RecordingHost":
        return RecordingHost(accept_deltas=False)

    def log(self, level: Level, message: str) -> None:
        self.logs.append((level, message))

    def emit_delta(self, delta: StreamDelta) -> Optional[str]:
        if not self.accept_deltas:
            return self.REFUSAL
        self.deltas.append(delta)
        return None

    def decide(self, agent: Agent, request: DecisionRequest) -> DecisionResponse:
        """Runs ``agent`` on ``request`` with a context over this host.
        Raises whatever the agent raises."""
        return agent.decide(request, Context(self))

    def decide_json(self, agent: Agent, request: Union[str, bytes, Dict[str, Any]]) -> Dict[str, Any]:
        """Runs ``agent`` on a request given as protocol JSON (text or parsed)
        and returns the decision as protocol JSON (parsed: a ``dict``).
        Both are checked against the protocol on the way, as the engine
        would."""
        decision = self.decide(agent, from_json(DecisionRequest, request))
        if not isinstance(decision, DecisionResponse):
            raise TypeError(f"decide returned {type(decision).__name__}, not a DecisionResponse")
        out: Dict[str, Any] = parse_json(to_json(decision))
        return out

    def text(self) -> str:
        """The text of all deltas, joined."""
        return "".join(d.text for d in self.deltas if d.text is not None)


def tool_execute(name: str, arguments: str, *, id: str = "call-1", attempt: int = 1) -> ToolExecute:
    """A ``tool.execute`` of ``name`` with ``arguments`` as the model wrote
    them, the input judged as the engine judges it before the schema check:
    a JSON object is ``valid``, anything else ``malformed``. Set ``input``
    to test an ``invalid`` one."""
    input: ToolInput
    try:
        value: Any = parse_json(arguments)
    except ValueError as e:
        input = MalformedInput(error=str(e))
    else:
        if isinstance(value, dict):
            input = ValidInput(value=value)
        else:
            input = MalformedInput(error="the arguments are not a JSON object")
    return ToolExecute(id=id, name=name, arguments=arguments, input=input, attempt=attempt)

