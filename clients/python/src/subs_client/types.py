"""The JSON the API takes and answers, typed.

The protocol's types (``ClientInput``, ``Message``, ``AgentConfig``,
``Call``, ``WorkerIdentity``, ...) are generated from the protocol's schema
into ``_protocol_types.py`` and re-exported here; the shapes of the server's
own answers (a session's snapshot, an agent, a tenant, ...) are declared
below, as the HTTP API reference (docs/api.md) describes them. All are
``TypedDict``s: values are the plain ``dict``s and ``list``s JSON gives.
"""

from __future__ import annotations

from typing import Any, Dict, List, Literal, NotRequired, Optional, TypedDict

from . import _protocol_types
from ._protocol_types import *  # noqa: F403 (every wire type, generated)
from ._protocol_types import Call, Message, MessageTree, WorkerIdentity

SessionStatus = Literal["idle", "running", "waiting"]
"""Where a session is: ``waiting`` is for an interrupt or a client tool."""


class InputAccepted(TypedDict):
    """What ``POST /v1/sessions/{id}/input`` answers (202)."""

    session_id: str
    #: The turn the input started, joined or queued; absent for inputs that
    #: settle something (``interrupt.resume``, ``tool.result``, ``tool.error``).
    turn_id: NotRequired[str]
    #: True when the ``turn_id`` was already known: nothing new was done.
    existing: bool


class OpenInterrupt(TypedDict):
    """An interrupt waiting for ``interrupt.resume``."""

    interrupt_id: str
    reason: str
    payload: NotRequired[Any]
    #: The JSON Schema a resume's payload must satisfy, when the agent gave one.
    resume_schema: NotRequired[Any]


class SessionView(TypedDict):
    """A session's snapshot (``GET /v1/sessions/{id}``)."""

    session_id: str
    agent_id: str
    status: SessionStatus
    #: The open turn.
    turn_id: Optional[str]
    #: The session's ``AgentConfig``, ``None`` until set.
    agent: Optional[Dict[str, Any]]
    #: The agent's state (``None`` when it never set one).
    state: Any
    #: The active path of the message tree.
    messages: List[Message]
    message_tree: MessageTree
    #: The open turn's calls.
    calls: List[Call]
    interrupts: List[OpenInterrupt]
    usage: Dict[str, Any]
    #: Dollars, a decimal string; ``None`` when no call had a known price.
    cost: Optional[str]
    budget: Optional[str]
    ancestry: List[str]
    identity: WorkerIdentity
    agent_version: NotRequired[str]
    #: The latest stored event's id: ``events(after=...)`` resumes from it.
    last_event_id: NotRequired[int]


class SessionSummary(TypedDict):
    """A session as ``GET /v1/sessions`` lists it."""

    session_id: str
    agent_id: str
    status: SessionStatus
    ancestry: List[str]
    identity: WorkerIdentity
    created_ms: int
    updated_ms: int
    turns: int
    usage: Dict[str, Any]
    cost: Optional[str]


class DecisionStep(TypedDict):
    """One decision of a session, as ``decisions`` lists it: the trigger the
    agent was asked about and what became of it."""

    #: The step's number in the session: 0, 1, 2…
    seq: int
    decision_id: str
    turn_id: Optional[str]
    #: The trigger, tagged by ``type``, as the agent received it.
    trigger: Dict[str, Any]
    #: ``pending``, ``applied``, ``failed`` or ``dropped``.
    status: str
    attempts: int
    error: Optional[str]
    #: The ``DecisionResponse``, once applied.
    decision: Optional[Dict[str, Any]]
    #: Ids of the messages the decision recorded.
    recorded: List[str]
    agent_version: Optional[str]
    requested_ms: Optional[int]
    decided_ms: Optional[int]
    latency_ms: Optional[float]
    #: The calls the decision started, in order.
    calls: List[Dict[str, Any]]


class Cancelled(TypedDict):
    """What cancelling a session answers."""

    cancelled: bool


class SessionBudget(TypedDict):
    """A session's budget and cost, in dollars."""

    session_id: str
    budget: Optional[str]
    cost: Optional[str]


class Usage(TypedDict):
    """What all the tenant's sessions cost, and its budget."""

    cost: Optional[str]
    budget: Optional[str]


class AgentVersion(TypedDict):
    """One stored version of an agent."""

    version: str
    #: ``component`` or ``http``.
    kind: str
    created_ms: int
    bytes: NotRequired[int]
    #: Whether it is the agent's current version.
    active: bool
    #: Decisions it made (only from ``get_agent``).
    decisions: NotRequired[int]


class Agent(TypedDict):
    """An agent: its current version, and every stored one."""

    agent_id: str
    version: str
    kind: str
    url: NotRequired[str]
    signed: NotRequired[bool]
    bytes: NotRequired[int]
    versions: List[AgentVersion]


class ReplayChange(TypedDict):
    """One difference between a recorded decision and the candidate's."""

    path: str
    #: ``added``, ``removed`` or ``changed``.
    change: str
    recorded: NotRequired[Any]
    candidate: NotRequired[Any]


class ReplayReport(TypedDict):
    """What ``replay`` found: which decisions a version makes differently."""

    agent_id: str
    version: str
    decisions: int
    same: int
    different: int
    failed: int
    skipped: int
    http_refused: int
    sessions: int
    elapsed_ms: int
    stopped: NotRequired[str]
    differences: List[Dict[str, Any]]
    failures: List[Dict[str, Any]]


class Token(TypedDict):
    """A token from ``POST /v1/tokens``: ``expires_at`` in Unix seconds;
    ``identity`` (and ``session_id``) for an end-user token."""

    token: str
    expires_at: int
    identity: NotRequired[WorkerIdentity]
    session_id: NotRequired[str]


class Tenant(TypedDict):
    """A tenant, as the admin API shows it."""

    tenant: str
    stored: bool
    configured: bool
    keys: int
    limits: Dict[str, Any]
    overrides: Dict[str, Any]
    created_ms: Optional[int]
    updated_ms: Optional[int]


class TenantLimits(TypedDict):
    """A tenant's limits: in effect, set by the operator, and spent."""

    tenant: str
    limits: Dict[str, Any]
    overrides: Dict[str, Any]
    #: Dollars the tenant's LLM calls cost.
    spent: str


class TenantDeleted(TypedDict):
    """What deleting a tenant did."""

    tenant: str
    deleted: bool
    revoked_keys: int
    cancelled_turns: int


class KeyInfo(TypedDict):
    """A tenant's key as listed: never the key, its hash and prefix."""

    tenant: str
    hash: str
    prefix: str
    name: NotRequired[Optional[str]]
    created_ms: int
    #: ``store`` or ``config``.
    source: str


class NewKey(TypedDict):
    """A key just made: ``key`` is in this answer only."""

    key: str
    tenant: str
    hash: str
    prefix: str
    name: NotRequired[Optional[str]]
    created_ms: int


class RevokedKey(TypedDict):
    """A key revoked."""

    tenant: str
    hash: str
    prefix: str
    revoked: bool


__all__ = [
    "SessionStatus",
    "InputAccepted",
    "OpenInterrupt",
    "SessionView",
    "SessionSummary",
    "DecisionStep",
    "Cancelled",
    "SessionBudget",
    "Usage",
    "AgentVersion",
    "Agent",
    "ReplayChange",
    "ReplayReport",
    "Token",
    "Tenant",
    "TenantLimits",
    "TenantDeleted",
    "KeyInfo",
    "NewKey",
    "RevokedKey",
]
__all__ += [name for name in _protocol_types.__all__ if name not in __all__]
