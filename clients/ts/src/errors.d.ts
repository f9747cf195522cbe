// The exceptions @subs/client throws (errors.js).

/** Anything this client throws. */
export declare class SubsError extends Error {}

/**
 * The API answered an error status: `status` the HTTP status, `code` the
 * API's stable code (`invalid_input`, `unknown_agent`, …), `field` the
 * request field at fault when there is one (`message.role`), `message` the
 * API's explanation, `retryAfter` the seconds a 429 or 503 asks to wait.
 */
export declare class ApiError extends SubsError {
  constructor(status: number, code: string, message: string, field?: string, retryAfter?: number);
  readonly status: number;
  readonly code: string;
  readonly field: string | undefined;
  readonly retryAfter: number | undefined;
}

/** 400: the body is not JSON, or not what the route takes (`field` says where). */
export declare class BadRequestError extends ApiError {}
/** 401: no key, an unknown or revoked key, an expired token. */
export declare class AuthenticationError extends ApiError {}
/** 403: a key of the wrong kind, or the admin API disabled. */
export declare class PermissionDeniedError extends ApiError {}
/** 404: an unknown session, agent, version or tenant; `unknown_agent`. */
export declare class NotFoundError extends ApiError {}
/** 408: the request body stalled. */
export declare class RequestTimeoutError extends ApiError {}
/** 409: nothing waits on that id, another agent's or identity's session, a current version, … */
export declare class ConflictError extends ApiError {}
/** 413: the body is over the tenant's limit. */
export declare class PayloadTooLargeError extends ApiError {}
/** 415: an agent upload that is neither WebAssembly nor JSON. */
export declare class UnsupportedMediaTypeError extends ApiError {}
/** 422: an invalid component, or an upload past a quota. */
export declare class UnprocessableError extends ApiError {}
/** 429: a limit of the tenant; the message names the setting. */
export declare class RateLimitError extends ApiError {}
/** 500: the server failed; its log says why. */
export declare class InternalServerError extends ApiError {}
/** 503: the server is shutting down or its store is unavailable. */
export declare class UnavailableError extends ApiError {}
/** The server could not be reached, or a stream not reconnected. */
export declare class ConnectionError extends SubsError {}
/** A stream sent what the client cannot read (an event too large, data not JSON). */
export declare class StreamError extends SubsError {}
