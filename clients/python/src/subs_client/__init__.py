"""A typed client of the subs HTTP API.

- :class:`Client` (sync) and :class:`AsyncClient` (asyncio): sessions,
  turns streamed as iterators that resume by themselves (their frames
  typed by event name: :data:`StreamEventFrame`), interrupts, client
  tools, agents, tokens; :class:`AdminClient` and :class:`AsyncAdminClient`
  for the operator's admin API.
- :mod:`subs_client.errors`: the typed exceptions, carrying the API's
  ``code``, ``field`` and ``message``.
- :mod:`subs_client.types`: the JSON the API takes and answers, as
  ``TypedDict``s (the protocol's generated from its schema).

The reference is docs/clients.md.
"""

from ._async import AsyncAdminClient, AsyncClient, AsyncEventStream
from ._core import user_message
from ._event import Event
from ._protocol_types import StreamEventFrame
from ._sync import AdminClient, Client, EventStream
from .errors import (
    ApiError,
    AuthenticationError,
    BadRequestError,
    ConflictError,
    ConnectionFailed,
    InternalServerError,
    NotFoundError,
    PayloadTooLargeError,
    PermissionDeniedError,
    RateLimitError,
    RequestTimeoutError,
    StreamError,
    SubsError,
    UnavailableError,
    UnprocessableError,
    UnsupportedMediaTypeError,
)

__version__ = "0.1.0"

__all__ = [
    "Client",
    "AsyncClient",
    "AdminClient",
    "AsyncAdminClient",
    "EventStream",
    "AsyncEventStream",
    "Event",
    "StreamEventFrame",
    "user_message",
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
