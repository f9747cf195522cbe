"""The requests of every call, built once for the sync and the async client:
each method of :class:`~subs_client.Client` and
:class:`~subs_client.AsyncClient` builds a :class:`Request` here and
sends it its own way."""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union
from urllib.parse import quote

import httpx

from ._protocol_types import ClientInput, ClientMessageInput, Content, WorkerIdentity

#: The default timeout of a request, in seconds.
DEFAULT_TIMEOUT = 30.0
#: How long a stream may send nothing before the client reconnects: the
#: server sends a comment every 15 seconds.
STREAM_READ_TIMEOUT = 60.0
#: The largest event a stream may send, in bytes.
DEFAULT_MAX_EVENT_BYTES = 64 << 20
#: How many reconnects in a row, without an event between them, before a
#: stream gives up.
DEFAULT_MAX_RECONNECTS = 8

#: A value meaning "not given", where ``None`` is a value (a payload).
UNSET: Any = object()


def seg(id: str) -> str:
    """``id`` percent-encoded as one path segment: every byte of its UTF-8
    outside ``A-Z a-z 0-9 - . _ ~``, as the server reads ids."""
    return quote(id, safe="")


@dataclass
class Request:
    """One HTTP request of a call."""

    method: str
    path: str
    params: Optional[Dict[str, str]] = None
    json: Any = None
    content: Optional[bytes] = None
    headers: Dict[str, str] = field(default_factory=dict)
    timeout: Optional[float] = None

    def kwargs(self) -> Dict[str, Any]:
        """The arguments of ``httpx.Client.request`` / ``stream``."""
        out: Dict[str, Any] = {"headers": self.headers}
        if self.params:
            out["params"] = self.params
        if self.json is not None:
            out["json"] = self.json
        if self.content is not None:
            out["content"] = self.content
        if self.timeout is not None:
            out["timeout"] = self.timeout
        return out


_NEXT = re.compile(r'<([^>]*)>\s*;\s*rel="?next"?')


def next_page(response: httpx.Response) -> Optional[str]:
    """The URL of the next page a listing's ``Link`` header names."""
    link = response.headers.get("link")
    if not link:
        return None
    found = _NEXT.search(link)
    return found.group(1) if found else None


def headers(key: Optional[str], extra: Optional[Mapping[str, str]]) -> Dict[str, str]:
    """The headers every request carries."""
    out = {"user-agent": "subs-client-python/0.1.0"}
    if key:
        out["authorization"] = f"Bearer {key}"
    out.update(extra or {})
    return out


# ---- sessions ---------------------------------------------------------------


def user_message(agent_id: str, content: Content, *, turn_id: Optional[str] = None) -> ClientMessageInput:
    """A ``client.message`` input: a user message to ``agent_id``'s session
    (which it creates on first use)."""
    value: ClientMessageInput = {
        "type": "client.message",
        "agent_id": agent_id,
        "message": {"role": "user", "content": content},
    }
    if turn_id is not None:
        value["turn_id"] = turn_id
    return value


def send(
    session_id: str,
    input: Union[ClientInput, Mapping[str, Any]],
    identity: Optional[WorkerIdentity],
    traceparent: Optional[str],
) -> Request:
    body = dict(input)
    if identity is not None:
        body["identity"] = identity
    hdrs = {"traceparent": traceparent} if traceparent else {}
    return Request("POST", f"/v1/sessions/{seg(session_id)}/input", json=body, headers=hdrs)


def streamed(
    input: Union[ClientInput, Mapping[str, Any]], identity: Optional[WorkerIdentity]
) -> Tuple[Dict[str, Any], str]:
    """The body of a streamed input, and its turn id: the input's, or one
    chosen here, so that sending it again (when the stream broke before its
    first event) is answered with the same turn rather than a second one."""
    body = dict(input)
    if body.get("type") not in ("client.message", "client.messages"):
        raise ValueError("only `client.message` and `client.messages` inputs start a turn that streams")
    turn_id = body.get("turn_id")
    if not isinstance(turn_id, str):
        turn_id = str(uuid.uuid4())
        body["turn_id"] = turn_id
    body["stream"] = True
    if identity is not None:
        body["identity"] = identity
    return body, turn_id


def events(session_id: str, after: Optional[int]) -> Request:
    hdrs = {"accept": "text/event-stream"}
    if after is not None:
        hdrs["last-event-id"] = str(after)
    return Request("GET", f"/v1/sessions/{seg(session_id)}/events", headers=hdrs)


def list_sessions(
    limit: Optional[int],
    after: Optional[str],
    identity: Optional[str],
    status: Optional[str],
    agent: Optional[str],
) -> Request:
    params: Dict[str, str] = {}
    for name, value in (("limit", limit), ("after", after), ("identity", identity), ("status", status), ("agent", agent)):
        if value is not None:
            params[name] = str(value)
    return Request("GET", "/v1/sessions", params=params)


def decisions(session_id: str, limit: Optional[int], after: Optional[int]) -> Request:
    params = {name: str(value) for name, value in (("limit", limit), ("after", after)) if value is not None}
    return Request("GET", f"/v1/sessions/{seg(session_id)}/decisions", params=params)


def resume(session_id: str, interrupt_id: str, payload: Any) -> Request:
    body: Dict[str, Any] = {"type": "interrupt.resume", "interrupt_id": interrupt_id}
    if payload is not UNSET:
        body["payload"] = payload
    return Request("POST", f"/v1/sessions/{seg(session_id)}/input", json=body)


def tool_result(session_id: str, call_id: str, result: Any, attempt: Optional[int]) -> Request:
    body: Dict[str, Any] = {"type": "tool.result", "id": call_id, "result": result}
    if attempt is not None:
        body["attempt"] = attempt
    return Request("POST", f"/v1/sessions/{seg(session_id)}/input", json=body)


def tool_error(session_id: str, call_id: str, error: str, retryable: bool, attempt: Optional[int]) -> Request:
    body: Dict[str, Any] = {"type": "tool.error", "id": call_id, "error": error, "retryable": retryable}
    if attempt is not None:
        body["attempt"] = attempt
    return Request("POST", f"/v1/sessions/{seg(session_id)}/input", json=body)


def budget(session_id: str, dollars: Union[str, float, int, None]) -> Request:
    return Request("PUT", f"/v1/sessions/{seg(session_id)}/budget", json={"budget": dollars})


# ---- agents -----------------------------------------------------------------


def upload_agent(agent_id: str, wasm: bytes, activate: bool) -> Request:
    return Request(
        "PUT",
        f"/v1/agents/{seg(agent_id)}",
        params=None if activate else {"activate": "false"},
        content=wasm,
        headers={"content-type": "application/wasm"},
        # A component is checked and compiled before it is answered.
        timeout=300.0,
    )


def register_worker(agent_id: str, url: str, secret: Optional[str], activate: bool) -> Request:
    body: Dict[str, Any] = {"url": url}
    if secret is not None:
        body["secret"] = secret
    return Request(
        "PUT", f"/v1/agents/{seg(agent_id)}", params=None if activate else {"activate": "false"}, json=body
    )


def replay(
    agent_id: str,
    version: str,
    sessions: Optional[List[str]],
    max_sessions: Optional[int],
    since: Optional[int],
    limit: Optional[int],
    timeout_secs: Optional[int],
) -> Request:
    body: Dict[str, Any] = {"version": version}
    for name, value in (
        ("sessions", sessions),
        ("max_sessions", max_sessions),
        ("since", since),
        ("limit", limit),
        ("timeout_secs", timeout_secs),
    ):
        if value is not None:
            body[name] = value
    # The replay runs within its own timeout (60 s unless set).
    return Request(
        "POST", f"/v1/agents/{seg(agent_id)}/replay", json=body, timeout=float(timeout_secs or 60) + 30.0
    )


# ---- tokens -----------------------------------------------------------------


def end_user_token(
    identity: Union[str, WorkerIdentity],
    metadata: Optional[Dict[str, str]],
    session_id: Optional[str],
    ttl_secs: Optional[int],
) -> Request:
    who: Dict[str, Any] = {"id": identity} if isinstance(identity, str) else dict(identity)
    if metadata is not None:
        who["metadata"] = metadata
    body: Dict[str, Any] = {"identity": who}
    if session_id is not None:
        body["session_id"] = session_id
    if ttl_secs is not None:
        body["ttl_secs"] = ttl_secs
    return Request("POST", "/v1/tokens", json=body)


# ---- admin ------------------------------------------------------------------


def put_tenant(tenant: str, limits: Optional[Mapping[str, Any]]) -> Request:
    body = None if limits is None else {"limits": dict(limits)}
    return Request("PUT", f"/v1/admin/tenants/{seg(tenant)}", json=body)


def list_keys(tenant: Optional[str]) -> Request:
    return Request("GET", "/v1/admin/keys", params=None if tenant is None else {"tenant": tenant})


def create_key(tenant: str, name: Optional[str]) -> Request:
    body: Dict[str, Any] = {"tenant": tenant}
    if name is not None:
        body["name"] = name
    return Request("POST", "/v1/admin/keys", json=body)
