"""The component side: :func:`export`, which makes an :class:`Agent` the
``decide`` export of a componentize-py component, and the :class:`Host`
over the engine's ``subs:agent/host`` imports.

componentize-py looks for a class named ``WitWorld`` in the module it
builds, with one method per function the world exports, and calls
``WitWorld().decide(request)`` for every decision. ``export`` makes that
class, so an agent module ends with::

    WitWorld = subs_sdk.export(MyAgent())
"""

import importlib
import sys
import traceback
from typing import Any, Dict, List

from . import wit
from .agent import Agent, Context, DecideError, Host, Level
from .branch import Messages
from .protocol import DecisionRequest, DecisionResponse, Message, ProtocolError, StreamDelta, ToolResult, from_json

# The bindings componentize-py generates for each component: imported by
# name, as modules the SDK has no static view of (``Any`` to a type checker).
Err: Any
_host: Any
_types: Any
try:  # inside a component (or where the bindings were generated)
    Err = importlib.import_module("componentize_py_types").Err
    _host = importlib.import_module("wit_world.imports.host")
    _types = importlib.import_module("wit_world.imports.subs_agent_types")
except ImportError:  # natively: tests use a RecordingHost
    Err = None
    _host = None
    _types = None

__all__ = ["export", "ComponentHost", "decide_wit"]


class ComponentHost(Host):
    """The host of an agent running as a component: the engine's imports."""

    def log(self, level: Level, message: str) -> None:
        _host.log(getattr(_host.Level, Level(level).name), message)

    def emit_delta(self, delta: StreamDelta) -> Any:
        try:
            _host.emit_delta(wit.to_wit(delta, _types))
        except Err as e:
            return str(e.value)
        return None


def decide_wit(agent: Agent, request: Any, host: Host, w: Any = None, messages: Any = None) -> Any:
    """The body of the ``decide`` export: WIT request in, WIT decision out;
    raises ``Err(decide-error)``. Takes the bindings ``w`` and the host as
    parameters so that the conversions are tested natively.

    ``messages`` is the branch's resource in a component built against
    ``subs:agent@0.2.0`` (``request`` is then its ``branch`` record, without
    the branch), ``None`` in one built against ``0.1.0`` (the branch is in
    ``request``)."""
    w = w if w is not None else _types
    err = Err
    if err is None:
        err = importlib.import_module("componentize_py_types").Err
    try:
        try:
            if messages is None:
                proto = wit.from_wit(DecisionRequest, request)
                Messages.of(proto)
            else:
                proto = wit.request_from_branch_wit(request, messages)
        except ProtocolError as e:
            raise DecideError(f"the engine sent a request the agent cannot read: {e}") from None
        decision = agent.decide(proto, Context(host))
        if not isinstance(decision, DecisionResponse):
            raise DecideError(f"decide returned {type(decision).__name__}, not a DecisionResponse")
        try:
            return wit.to_wit(decision, w)
        except ProtocolError as e:
            raise DecideError(f"the decision is not valid protocol: {e}") from None
    except DecideError as e:
        raise err(w.DecideError(message=e.message, retryable=e.retryable)) from None
    except Exception as e:  # a bug in the agent: fail the delivery, terminally
        traceback.print_exc(file=sys.stderr)
        # The traceback's last line (with any notes), as Python prints it:
        # `ZeroDivisionError: division by zero`.
        summary = "".join(traceback.format_exception_only(type(e), e)).strip()
        raise err(w.DecideError(message=summary, retryable=False)) from None


def export(agent: Agent) -> type:
    """The ``WitWorld`` class componentize-py expects, deciding with
    ``agent``. The agent object is made once, when the component is built
    (componentize-py snapshots the module after importing it), and serves
    every decision; each decision runs in a fresh instance, so nothing it
    changes lasts: keep what must last in the session's ``state``."""
    if not isinstance(agent, Agent):
        raise TypeError(f"export() takes an Agent instance, not {agent!r}")

    class WitWorld:
        # `messages` is there when the component is built against
        # `subs:agent@0.2.0` (the default), not against `0.1.0`.
        def decide(self, request: Any, messages: Any = None) -> Any:
            return decide_wit(agent, request, ComponentHost(), messages=messages)

    WitWorld.__qualname__ = "WitWorld"
    if _types is not None:
        _warm_up(_types)
    return WitWorld


def _warm_up(w: Any) -> None:
    """Runs the conversions on a made-up request and decision while
    componentize-py builds the component, so that the snapshot it takes
    after the import holds them warm: the interpreter's specialized
    bytecode and the caches it fills on first use would otherwise be made
    again by every decision's fresh instance (about a tenth of a tool
    decision, measured). Never fails the build: a warm-up that fails only
    costs speed."""
    try:
        messages: List[Dict[str, Any]] = []
        for i, role in enumerate(["user", "assistant", "tool"] * 2):
            message: Dict[str, Any] = {"id": f"msg_{i}", "role": role, "content": "text " * 10}
            if role == "assistant":
                message["tool_calls"] = [
                    {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                ]
            elif role == "tool":
                message["tool_call_id"] = "call_1"
            messages.append(message)
        base = {
            "session_id": "s", "decision_id": "d", "agent_id": "a", "identity": {}, "proposed": {},
            "state": {"n": 1}, "agent": {"model": "m", "tools": [{"name": "f", "input": {"type": "object"}}]},
            "calls": [], "pending_calls": 0, "messages": messages,
            "message_tree": {
                "nodes": [{"message": m, "parent_id": f"msg_{i - 1}" if i else None} for i, m in enumerate(messages)],
                "head_id": "msg_5",
            },
            "ancestry": [], "attempts": 1, "deadline": None, "turn_id": "t",
        }
        triggers: List[Dict[str, Any]] = [
            {"type": "session.start"},
            {"type": "tool.execute", "id": "call_1", "name": "f", "arguments": "{}",
             "input": {"status": "valid", "value": {"a": 1}}, "attempt": 1},
            {"type": "client.messages", "messages": messages, "new_from": 5, "client": {}},
        ]
        decision = DecisionResponse(state={"n": 2}).with_action(ToolResult(result={"sum": 3}))
        try:  # the branch's record, when the component is built against 0.2.0
            branch: Any = importlib.import_module("wit_world.imports.branch")
        except ImportError:
            branch = None
        for trigger in triggers:
            request = wit.to_wit(from_json(DecisionRequest, dict(base, trigger=trigger)), w)
            without = None
            if branch is not None:
                fields = dict(vars(request))
                del fields["messages"], fields["message_tree"]
                if trigger["type"] == "client.messages":
                    # The branch's trigger: the view's first 5 messages shared.
                    view = request.trigger.value
                    fields["trigger"] = branch.Trigger_ClientMessages(branch.ClientMessagesTrigger(
                        shared=5, rest=view.messages[5:], new_from=view.new_from, client=view.client))
                without = branch.DecisionRequest(**fields)
            for _ in range(20):
                wit.from_wit(DecisionRequest, request)
                if without is not None:
                    wit.request_from_branch_wit(without, None)
                    wit.from_wit(List[Message], request.messages)
                wit.to_wit(decision, w)
    except Exception:  # noqa: BLE001 (see above)
        pass
