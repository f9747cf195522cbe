"""The :class:`Agent` base class, :class:`Context` (what the engine offers
while an agent decides) over a :class:`Host`, and :class:`DecideError`."""

import enum
from typing import Optional, Union

from .protocol import DecisionRequest, DecisionResponse, StreamDelta


class DecideError(Exception):
    """A decision the agent could not make. Raising it fails this delivery:
    when ``retryable``, the engine delivers the same request again per the
    agent's retry policy; otherwise the turn fails.

    Any other exception that escapes :meth:`Agent.decide` fails the delivery
    the same way, terminally, with the traceback's last line as the message
    (``ZeroDivisionError: division by zero``; the whole traceback goes to
    stderr, which the engine logs)."""

    def __init__(self, message: str, retryable: bool = False):
        super().__init__(message)
        self.message = message
        self.retryable = retryable

    @staticmethod
    def terminal(message: str) -> "DecideError":
        """An error that delivering the request again would not fix."""
        return DecideError(message, False)

    @staticmethod
    def retryable_error(message: str) -> "DecideError":
        """An error that may go away on another delivery."""
        return DecideError(message, True)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, DecideError) and other.message == self.message and other.retryable == self.retryable
        )

    def __hash__(self) -> int:
        return hash((self.message, self.retryable))

    def __repr__(self) -> str:
        return f"DecideError({self.message!r}, retryable={self.retryable})"


class Level(str, enum.Enum):
    """How much a log line matters."""

    TRACE = "trace"
    DEBUG = "debug"
    INFO = "info"
    WARN = "warn"
    ERROR = "error"

    def __str__(self) -> str:
        return self.value


class Host:
    """Where an agent's logs and streamed deltas go: the engine's imports in
    a component, a :class:`~subs_sdk.testing.RecordingHost` in a test."""

    def log(self, level: Level, message: str) -> None:
        raise NotImplementedError

    def emit_delta(self, delta: StreamDelta) -> Optional[str]:
        """Streams ``delta``; returns ``None``, or the reason it was refused."""
        raise NotImplementedError


class Context:
    """What the engine offers an agent during one decision: logging, and
    streaming the reply of an ``llm.execute`` it answers.

    ``print`` works too: a component's stdout and stderr go to the engine's
    logs."""

    def __init__(self, host: Host):
        self.host = host

    def log(self, level: Union[Level, str], message: str) -> None:
        """Writes a line to the engine's logs at ``level``."""
        self.host.log(Level(level), str(message))

    def trace(self, message: str) -> None:
        self.log(Level.TRACE, message)

    def debug(self, message: str) -> None:
        self.log(Level.DEBUG, message)

    def info(self, message: str) -> None:
        self.log(Level.INFO, message)

    def warn(self, message: str) -> None:
        self.log(Level.WARN, message)

    def error(self, message: str) -> None:
        self.log(Level.ERROR, message)

    def emit_delta(self, delta: StreamDelta) -> None:
        """Streams a piece of the reply of the ``llm.execute`` being answered
        (one with ``stream: true``); clients see it at once. The final
        ``llm.result`` must still carry the whole reply.

        Raises a terminal :class:`DecideError` with the engine's reason when
        the decision answers no such trigger."""
        refused = self.host.emit_delta(delta)
        if refused is not None:
            raise DecideError(refused)

    def emit_text(self, text: str) -> None:
        """Streams a piece of reply text; see :meth:`emit_delta`."""
        self.emit_delta(StreamDelta(text=text))


class Agent:
    """An agent: decides what happens next whenever the engine asks.

    The default :meth:`decide` accepts the engine's proposal, so an empty
    subclass is a complete chat agent::

        class Passthrough(Agent):
            pass
    """

    def decide(self, request: DecisionRequest, cx: Context) -> DecisionResponse:
        """Decides what happens next for ``request.trigger``.

        ``request.proposed`` is what an ordinary agent loop would do: return
        it, change it, or decide something else. It is empty when only the
        agent knows what to do (``tool.execute``, ``llm.execute``,
        ``client.action``, ``interrupt.resumed``).

        Raise :class:`DecideError` to fail the delivery."""
        return request.proposed
