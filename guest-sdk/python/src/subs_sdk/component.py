"""The component side: :func:`export`, which makes an :class:`Agent` the
``decide`` export of a componentize-py component, and the :class:`Host`
over the engine's ``subs:agent/host`` imports.

componentize-py looks for a class named ``WitWorld`` in the module it
builds, with one method per function the world exports, and calls
``WitWorld().decide(request)`` for every decision. ``export`` makes that
class, so an agent module ends with::

    WitWorld = subs_sdk.export(MyAgent())
"""

import sys
import traceback
from typing import Any

from . import wit
from .agent import Agent, Context, DecideError, Host, Level
from .protocol import DecisionRequest, DecisionResponse, ProtocolError, StreamDelta

try:  # inside a component (or where the bindings were generated)
    from componentize_py_types import Err
    from wit_world.imports import host as _host
    from wit_world.imports import subs_agent_types as _types
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


def decide_wit(agent: Agent, request: Any, host: Host, w: Any = None) -> Any:
    """The body of the ``decide`` export: WIT request in, WIT decision out;
    raises ``Err(decide-error)``. Takes the bindings ``w`` and the host as
    parameters so that the conversions are tested natively."""
    w = w if w is not None else _types
    err = Err
    if err is None:
        from componentize_py_types import Err as err
    try:
        try:
            proto = wit.from_wit(DecisionRequest, request)
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
        raise err(w.DecideError(message=f"{type(e).__name__}: {e}", retryable=False)) from None


def export(agent: Agent) -> type:
    """The ``WitWorld`` class componentize-py expects, deciding with
    ``agent``. The agent object is made once, when the component is built
    (componentize-py snapshots the module after importing it), and serves
    every decision; each decision runs in a fresh instance, so nothing it
    changes lasts: keep what must last in the session's ``state``."""
    if not isinstance(agent, Agent):
        raise TypeError(f"export() takes an Agent instance, not {agent!r}")

    class WitWorld:
        def decide(self, request: Any) -> Any:
            return decide_wit(agent, request, ComponentHost())

    WitWorld.__qualname__ = "WitWorld"
    return WitWorld
