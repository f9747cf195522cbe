"""The exceptions the client raises.

Every answer of the API with a 4xx or 5xx status is an :class:`ApiError`
(a subclass per status: :class:`NotFoundError` for 404, ...) carrying the
body the server sends, ``{"error", "code", "field"?}``: ``code`` is stable
(``invalid_input``, ``unknown_agent``, ``limit_exceeded``, ...), ``field``
names the offending field of the request when there is one
(``message.role``, ``identity.id``), ``message`` is for people.
"""

from __future__ import annotations

import json
from typing import Dict, Optional, Type

import httpx

__all__ = [
    "SubsError",
    "ApiError",
    "BadRequestError",
    "AuthenticationError",
    "PermissionDeniedError",
    "NotFoundError",
    "RequestTimeoutError",
    "ConflictError",
    "PayloadTooLargeError",
    "UnsupportedMediaTypeError",
    "UnprocessableError",
    "RateLimitError",
    "InternalServerError",
    "UnavailableError",
    "ConnectionFailed",
    "StreamError",
]


class SubsError(Exception):
    """Anything this client raises."""


class ApiError(SubsError):
    """The API answered an error status. ``status`` is the HTTP status,
    ``code`` the API's stable code, ``field`` the request field at fault
    (or ``None``), ``message`` the explanation; ``retry_after`` the seconds
    a 503 or 429 asks to wait, when it says."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        field: Optional[str] = None,
        retry_after: Optional[float] = None,
    ) -> None:
        super().__init__(f"{status} {code}: {message}" + (f" (field `{field}`)" if field else ""))
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        self.retry_after = retry_after


class BadRequestError(ApiError):
    """400: the body is not JSON (``invalid_json``) or not what the route
    takes (``invalid_input``, ``field`` names where)."""


class AuthenticationError(ApiError):
    """401: no key, an unknown or revoked key, an expired token."""


class PermissionDeniedError(ApiError):
    """403: a key of the wrong kind (``forbidden``), or an admin route of a
    server without an operator key (``admin_disabled``)."""


class NotFoundError(ApiError):
    """404: an unknown session, agent, version or tenant (another tenant's
    ids answer the same), or ``unknown_agent`` for an input naming one."""


class RequestTimeoutError(ApiError):
    """408: the request body stalled."""


class ConflictError(ApiError):
    """409: nothing waits on the id a settling input names, the session runs
    another agent or has another identity, a version is current, ..."""


class PayloadTooLargeError(ApiError):
    """413: the body is over the tenant's limit."""


class UnsupportedMediaTypeError(ApiError):
    """415: an agent upload that is neither WebAssembly nor JSON."""


class UnprocessableError(ApiError):
    """422: an invalid component (``invalid_component``), or an upload past
    a quota (``limit_exceeded``)."""


class RateLimitError(ApiError):
    """429: a limit of the tenant (sessions, open streams, uploads an hour,
    listings); the message names the setting."""


class InternalServerError(ApiError):
    """500: the server failed; its log says why."""


class UnavailableError(ApiError):
    """503: the server is shutting down or its store is unavailable; the
    message says what became of what was sent."""


class ConnectionFailed(SubsError):
    """The server could not be reached, or a stream could not be
    reconnected after the client's ``max_reconnects`` tries."""


class StreamError(SubsError):
    """A stream sent something that is not server-sent events the client
    can read (an event past ``max_event_bytes``, data that is not JSON)."""


_BY_STATUS: Dict[int, Type[ApiError]] = {
    400: BadRequestError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    408: RequestTimeoutError,
    409: ConflictError,
    413: PayloadTooLargeError,
    415: UnsupportedMediaTypeError,
    422: UnprocessableError,
    429: RateLimitError,
    500: InternalServerError,
    503: UnavailableError,
}


def error_from(status: int, body: bytes, headers: httpx.Headers) -> ApiError:
    """The exception for an error answer: its JSON body read, or, for a body
    that is not the API's (a proxy's page), the status with the text."""
    code, message, field = f"http_{status}", "", None
    try:
        value = json.loads(body)
    except ValueError:
        value = None
    if isinstance(value, dict) and isinstance(value.get("code"), str):
        code = value["code"]
        message = str(value.get("error", ""))
        field = value.get("field") if isinstance(value.get("field"), str) else None
    else:
        message = body[:512].decode("utf-8", "replace").strip() or httpx.codes.get_reason_phrase(status)
    retry_after: Optional[float] = None
    try:
        retry_after = float(headers["retry-after"]) if "retry-after" in headers else None
    except ValueError:
        retry_after = None
    cls = _BY_STATUS.get(status, ApiError)
    return cls(status, code, message, field, retry_after)
