"""The synchronous client."""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, Generator, Iterator, List, Mapping, Optional, Union, cast

import httpx

from . import _core
from ._core import UNSET, Request, seg
from ._protocol_types import ClientInput, Content, WorkerIdentity
from ._protocol_types import StreamEventFrame
from ._stream import Resume, SseReader, backoff
from .errors import ApiError, ConnectionFailed, error_from
from .types import (
    Agent,
    AgentVersion,
    Cancelled,
    DecisionStep,
    InputAccepted,
    KeyInfo,
    NewKey,
    OpenInterrupt,
    ReplayReport,
    RevokedKey,
    SessionBudget,
    SessionSummary,
    SessionView,
    Tenant,
    TenantDeleted,
    TenantLimits,
    Token,
    Usage,
)

__all__ = ["Client", "AdminClient", "EventStream"]


class EventStream:
    """Events of a session as an iterator that reconnects by itself.

    A dropped connection (or a stream the server ended early) is reopened
    with ``Last-Event-ID`` set to the last stored event yielded, so every
    stored event is yielded exactly once, in order. A turn's stream
    (:meth:`Client.stream`) ends after the turn's ``turn.done`` or
    ``turn.failed``; a session's (:meth:`Client.events`) goes on until it is
    closed (``close()``, leaving a ``with`` block, or ``break``). Errors the
    API answers are raised as :class:`~subs_client.errors.ApiError`; after
    ``max_reconnects`` failed reconnects in a row,
    :class:`~subs_client.errors.ConnectionFailed`.
    """

    def __init__(self, client: "Client", first: Request, again: Callable[[Resume], Request], resume: Resume) -> None:
        self._client = client
        self._resume = resume
        self._events = self._run(first, again)

    @property
    def turn_id(self) -> Optional[str]:
        """The turn a turn's stream follows."""
        return self._resume.turn_id

    @property
    def last_event_id(self) -> Optional[int]:
        """The id of the last stored event yielded."""
        return self._resume.last_id

    def __iter__(self) -> Iterator[StreamEventFrame]:
        return self

    def __next__(self) -> StreamEventFrame:
        return next(self._events)

    def close(self) -> None:
        """Closes the connection; the iterator ends."""
        self._events.close()

    def __enter__(self) -> "EventStream":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run(self, first: Request, again: Callable[[Resume], Request]) -> Generator[StreamEventFrame, None, None]:
        client, resume = self._client, self._resume
        request, failures = first, 0
        last_error: Optional[ApiError] = None
        while True:
            resume.progressed = False
            try:
                with client._http.stream(request.method, request.path, **client._stream_kwargs(request)) as response:
                    if response.status_code >= 400:
                        last_error = error_from(response.status_code, response.read(), response.headers)
                        if response.status_code != 503:
                            raise last_error
                    else:
                        reader = SseReader(client.max_event_bytes)
                        for chunk in response.iter_bytes():
                            for event in reader.feed(chunk):
                                if resume.accept(event):
                                    # The server sends the frames its schema types.
                                    yield cast(StreamEventFrame, event)
                                    if resume.done:
                                        return
            except httpx.TransportError:
                pass
            failures = 0 if resume.progressed else failures + 1
            if failures > client.max_reconnects:
                if last_error is not None:
                    raise last_error
                raise ConnectionFailed(
                    f"the stream could not be reconnected after {client.max_reconnects} tries "
                    f"(last event id {resume.last_id})"
                )
            time.sleep(backoff(max(failures, 1)))
            request = again(resume)


class _Base:
    def __init__(
        self,
        base_url: str,
        key: Optional[str],
        timeout: float,
        headers: Optional[Mapping[str, str]],
        http: Optional[httpx.Client],
    ) -> None:
        self._owned = http is None
        self._http = http or httpx.Client(base_url=base_url.rstrip("/"), timeout=timeout)
        self._timeout = timeout
        self._http.headers.update(_core.headers(key, headers))

    def close(self) -> None:
        """Closes the connections (not an ``http`` client passed in)."""
        if self._owned:
            self._http.close()

    def _stream_kwargs(self, request: Request) -> Dict[str, Any]:
        # A stream is silent between events: it waits longer for a read
        # than a request (the server sends a comment every 15 seconds).
        kwargs = request.kwargs()
        kwargs.setdefault("timeout", httpx.Timeout(self._timeout, read=max(self._timeout, _core.STREAM_READ_TIMEOUT)))
        return kwargs

    def _response(self, request: Request) -> httpx.Response:
        try:
            response = self._http.request(request.method, request.path, **request.kwargs())
        except httpx.TransportError as e:
            raise ConnectionFailed(f"{request.method} {request.path}: {e}") from e
        if response.status_code >= 400:
            raise error_from(response.status_code, response.content, response.headers)
        return response

    def _call(self, request: Request) -> Any:
        response = self._response(request)
        if response.status_code == 204 or not response.content:
            return None
        return response.json()


class Client(_Base):
    """A client of the subs HTTP API, with a tenant's key or an end-user
    token (``key``). ``base_url`` is the server (``http://127.0.0.1:8080``);
    ``timeout`` bounds each request (a stream reconnects after
    ``max(timeout, 60)`` seconds of silence); ``http`` is an
    ``httpx.Client`` of your own (its ``base_url`` set), for proxies or
    TLS settings. Use it as a context manager, or call :meth:`close`.

    Every method raises :class:`~subs_client.errors.ApiError` (a subclass
    per status) for an error the API answers, and
    :class:`~subs_client.errors.ConnectionFailed` when the server cannot be
    reached."""

    def __init__(
        self,
        base_url: str,
        key: Optional[str] = None,
        *,
        timeout: float = _core.DEFAULT_TIMEOUT,
        max_reconnects: int = _core.DEFAULT_MAX_RECONNECTS,
        max_event_bytes: int = _core.DEFAULT_MAX_EVENT_BYTES,
        headers: Optional[Mapping[str, str]] = None,
        http: Optional[httpx.Client] = None,
    ) -> None:
        super().__init__(base_url, key, timeout, headers, http)
        #: Reconnects in a row without an event before a stream gives up.
        self.max_reconnects = max_reconnects
        #: The largest event a stream may send.
        self.max_event_bytes = max_event_bytes

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- sessions -----------------------------------------------------------

    def send(
        self,
        session_id: str,
        input: Union[ClientInput, Mapping[str, Any]],
        *,
        identity: Optional[WorkerIdentity] = None,
        traceparent: Optional[str] = None,
    ) -> InputAccepted:
        """Sends any input (``client.message``, ``client.messages``,
        ``client.action``, ``interrupt.resume``, ``tool.result``,
        ``tool.error``); the first three create the session on first use,
        owned by ``identity`` when given. The turn runs in the background."""
        return cast(InputAccepted, self._call(_core.send(session_id, input, identity, traceparent)))

    def send_message(
        self,
        session_id: str,
        agent_id: str,
        content: Content,
        *,
        turn_id: Optional[str] = None,
        identity: Optional[WorkerIdentity] = None,
    ) -> InputAccepted:
        """Sends a user message (creating the session for ``agent_id`` on
        first use). A ``turn_id`` makes it idempotent."""
        return self.send(session_id, _core.user_message(agent_id, content, turn_id=turn_id), identity=identity)

    def stream(
        self,
        session_id: str,
        input: Union[ClientInput, Mapping[str, Any]],
        *,
        identity: Optional[WorkerIdentity] = None,
    ) -> EventStream:
        """Sends a ``client.message`` or ``client.messages`` input and
        streams the turn it starts, from ``turn.started`` to ``turn.done`` or
        ``turn.failed`` (token deltas included when the agent streams). The
        input is sent when iteration starts. A broken stream resumes by
        itself: from the session's events after the last one received, or,
        when none was, by sending the input again under the same
        ``turn_id`` (one is chosen when the input has none), which the server
        answers with the same turn."""
        body, turn_id = _core.streamed(input, identity)
        first = Request("POST", f"/v1/sessions/{seg(session_id)}/input", json=body)

        def again(resume: Resume) -> Request:
            if resume.last_id is None:
                return first
            return _core.events(session_id, resume.last_id)

        return EventStream(self, first, again, Resume(turn_id=turn_id))

    def stream_message(
        self,
        session_id: str,
        agent_id: str,
        content: Content,
        *,
        turn_id: Optional[str] = None,
        identity: Optional[WorkerIdentity] = None,
    ) -> EventStream:
        """:meth:`stream` of a user message."""
        return self.stream(session_id, _core.user_message(agent_id, content, turn_id=turn_id), identity=identity)

    def events(self, session_id: str, *, after: Optional[int] = None) -> EventStream:
        """Follows a session: its stored events after ``after`` (all when
        ``None``), then live ones, until closed; reconnects by itself."""
        return EventStream(
            self,
            _core.events(session_id, after),
            lambda resume: _core.events(session_id, resume.last_id),
            Resume(after=after),
        )

    def get_session(self, session_id: str) -> SessionView:
        """The session's snapshot."""
        return cast(SessionView, self._call(Request("GET", f"/v1/sessions/{seg(session_id)}")))

    def list_sessions(
        self,
        *,
        limit: Optional[int] = None,
        after: Optional[str] = None,
        identity: Optional[str] = None,
        status: Optional[str] = None,
        agent: Optional[str] = None,
    ) -> Iterator[SessionSummary]:
        """The tenant's sessions (an end-user token's: its own), by id,
        following the pages (``limit`` a page) as the iterator is read;
        filtered by owner ``identity``, ``status`` (``idle``, ``running``,
        ``waiting``) or ``agent``."""
        request: Optional[Request] = _core.list_sessions(limit, after, identity, status, agent)
        while request is not None:
            response = self._response(request)
            yield from cast(List[SessionSummary], response.json())
            link = _core.next_page(response)
            request = Request("GET", link) if link else None

    def cancel(self, session_id: str) -> bool:
        """Ends the open turn (``turn.failed``, code ``cancelled``); whether
        one was open."""
        answer = cast(Cancelled, self._call(Request("POST", f"/v1/sessions/{seg(session_id)}/cancel")))
        return answer["cancelled"]

    def set_budget(self, session_id: str, dollars: Union[str, float, int, None]) -> SessionBudget:
        """Sets the session's own budget in dollars (``None``: none)."""
        return cast(SessionBudget, self._call(_core.budget(session_id, dollars)))

    def usage(self) -> Usage:
        """What the tenant's sessions cost, and its budget."""
        return cast(Usage, self._call(Request("GET", "/v1/usage")))

    def decisions(
        self, session_id: str, *, limit: Optional[int] = None, after: Optional[int] = None
    ) -> Iterator[DecisionStep]:
        """Every decision of the session in order (what the inspector's
        timeline shows), following the pages (``limit`` a page) as the
        iterator is read; ``after`` a step number to start after."""
        request: Optional[Request] = _core.decisions(session_id, limit, after)
        while request is not None:
            response = self._response(request)
            yield from cast(List[DecisionStep], response.json())
            link = _core.next_page(response)
            request = Request("GET", link) if link else None

    # ---- interrupts and client tools ----------------------------------------

    def interrupts(self, session_id: str) -> List[OpenInterrupt]:
        """The session's open interrupts."""
        return self.get_session(session_id)["interrupts"]

    def resume(self, session_id: str, interrupt_id: str, payload: Any = UNSET) -> InputAccepted:
        """Resumes an interrupt with ``payload`` (checked against its
        ``resume_schema``: a payload it refuses is a 400 naming the field,
        and the interrupt stays open)."""
        return cast(InputAccepted, self._call(_core.resume(session_id, interrupt_id, payload)))

    def tool_result(
        self, session_id: str, call_id: str, result: Any, *, attempt: Optional[int] = None
    ) -> InputAccepted:
        """Answers a client tool call (a ``tool.call`` event) with its result."""
        return cast(InputAccepted, self._call(_core.tool_result(session_id, call_id, result, attempt)))

    def tool_error(
        self,
        session_id: str,
        call_id: str,
        error: str,
        *,
        retryable: bool = False,
        attempt: Optional[int] = None,
    ) -> InputAccepted:
        """Answers a client tool call with an error."""
        return cast(InputAccepted, self._call(_core.tool_error(session_id, call_id, error, retryable, attempt)))

    # ---- agents -------------------------------------------------------------

    def upload_agent(self, agent_id: str, wasm: bytes, *, activate: bool = True) -> Agent:
        """Uploads a component (its bytes) as a version of ``agent_id``; it
        becomes current unless ``activate`` is false."""
        return cast(Agent, self._call(_core.upload_agent(agent_id, wasm, activate)))

    def register_worker(
        self, agent_id: str, url: str, *, secret: Optional[str] = None, activate: bool = True
    ) -> Agent:
        """Registers an HTTP worker as a version of ``agent_id``."""
        return cast(Agent, self._call(_core.register_worker(agent_id, url, secret, activate)))

    def get_agent(self, agent_id: str) -> Agent:
        """The agent, with its versions and their decision counts."""
        return cast(Agent, self._call(Request("GET", f"/v1/agents/{seg(agent_id)}")))

    def list_agents(self) -> List[Agent]:
        """The tenant's agents."""
        return cast(List[Agent], self._call(Request("GET", "/v1/agents")))

    def delete_agent(self, agent_id: str) -> None:
        """Deletes the agent and its versions."""
        self._call(Request("DELETE", f"/v1/agents/{seg(agent_id)}"))

    def agent_versions(self, agent_id: str) -> List[AgentVersion]:
        """The agent's stored versions, in upload order."""
        return self.get_agent(agent_id)["versions"]

    def activate(self, agent_id: str, version: str) -> Agent:
        """Makes a stored version (``sha256:…``) current (also a rollback)."""
        request = Request("PUT", f"/v1/agents/{seg(agent_id)}/current", json={"version": version})
        return cast(Agent, self._call(request))

    def delete_version(self, agent_id: str, version: str) -> Agent:
        """Removes a stored version that is not current."""
        request = Request("DELETE", f"/v1/agents/{seg(agent_id)}/versions/{seg(version)}")
        return cast(Agent, self._call(request))

    def replay(
        self,
        agent_id: str,
        version: str,
        *,
        sessions: Optional[List[str]] = None,
        max_sessions: Optional[int] = None,
        since: Optional[int] = None,
        limit: Optional[int] = None,
        timeout_secs: Optional[int] = None,
    ) -> ReplayReport:
        """Has ``version`` decide again what the agent decided before; which
        decisions it makes differently. Nothing is stored."""
        request = _core.replay(agent_id, version, sessions, max_sessions, since, limit, timeout_secs)
        return cast(ReplayReport, self._call(request))

    # ---- tokens -------------------------------------------------------------

    def stream_token(self) -> Token:
        """A five-minute token for ``?token=`` on the events endpoint."""
        return cast(Token, self._call(Request("POST", "/v1/tokens")))

    def end_user_token(
        self,
        identity: Union[str, WorkerIdentity],
        *,
        metadata: Optional[Dict[str, str]] = None,
        session_id: Optional[str] = None,
        ttl_secs: Optional[int] = None,
    ) -> Token:
        """An end-user token for ``identity`` (an id, or ``{"id",
        "metadata"}``): it reaches only that identity's sessions (only
        ``session_id`` when given), for ``ttl_secs`` (default 900). Hand it to
        that user's browser, or to ``Client(url, key=token)``."""
        return cast(Token, self._call(_core.end_user_token(identity, metadata, session_id, ttl_secs)))

    # ---- operations ---------------------------------------------------------

    def healthz(self) -> Dict[str, Any]:
        """``{"status": "ok"}`` when the server is up."""
        return cast(Dict[str, Any], self._call(Request("GET", "/healthz")))


class AdminClient(_Base):
    """A client of the admin API (``/v1/admin``), with the operator key:
    tenants, their limits and their keys, changed while the server runs."""

    def __init__(
        self,
        base_url: str,
        key: str,
        *,
        timeout: float = _core.DEFAULT_TIMEOUT,
        headers: Optional[Mapping[str, str]] = None,
        http: Optional[httpx.Client] = None,
    ) -> None:
        super().__init__(base_url, key, timeout, headers, http)

    def __enter__(self) -> "AdminClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def list_tenants(self) -> List[Tenant]:
        """Every tenant, by name."""
        return cast(List[Tenant], self._call(Request("GET", "/v1/admin/tenants")))

    def get_tenant(self, tenant: str) -> Tenant:
        """One tenant."""
        return cast(Tenant, self._call(Request("GET", f"/v1/admin/tenants/{seg(tenant)}")))

    def put_tenant(self, tenant: str, *, limits: Optional[Mapping[str, Any]] = None) -> Tenant:
        """Creates the tenant (or answers the existing one), setting
        ``limits`` when given."""
        return cast(Tenant, self._call(_core.put_tenant(tenant, limits)))

    def delete_tenant(self, tenant: str) -> TenantDeleted:
        """Deletes the tenant: revokes its keys, cancels its open turns."""
        return cast(TenantDeleted, self._call(Request("DELETE", f"/v1/admin/tenants/{seg(tenant)}")))

    def get_limits(self, tenant: str) -> TenantLimits:
        """The tenant's limits in effect, what the operator set, what it spent."""
        return cast(TenantLimits, self._call(Request("GET", f"/v1/admin/tenants/{seg(tenant)}/limits")))

    def set_limits(self, tenant: str, limits: Mapping[str, Any]) -> TenantLimits:
        """Replaces what the operator set (``{}``: the config file's again);
        ``None`` for a field means no limit."""
        request = Request("PUT", f"/v1/admin/tenants/{seg(tenant)}/limits", json=dict(limits))
        return cast(TenantLimits, self._call(request))

    def list_keys(self, tenant: Optional[str] = None) -> List[KeyInfo]:
        """The tenants' keys (one tenant's), never the keys themselves."""
        return cast(List[KeyInfo], self._call(_core.list_keys(tenant)))

    def create_key(self, tenant: str, *, name: Optional[str] = None) -> NewKey:
        """A new key of ``tenant``: ``key`` is in this answer only."""
        return cast(NewKey, self._call(_core.create_key(tenant, name)))

    def revoke_key(self, key: str) -> RevokedKey:
        """Revokes a key named by its hash, 8 or more of its leading
        characters, or its prefix."""
        return cast(RevokedKey, self._call(Request("DELETE", f"/v1/admin/keys/{seg(key)}")))

