// The exceptions the client throws: every error status the API answers is
// an ApiError (a subclass per status) carrying the body the server sends,
// {error, code, field?}: `code` is stable, `field` names the offending field
// of the request when there is one, `message` is for people.

/** Anything this client throws. */
export class SubsError extends Error {
  constructor(message) {
    super(message);
    this.name = new.target.name;
  }
}

/** The API answered an error status. */
export class ApiError extends SubsError {
  constructor(status, code, message, field = undefined, retryAfter = undefined) {
    // `message` is the API's own, as its body gives it.
    super(message);
    this.status = status;
    this.code = code;
    this.field = field;
    this.retryAfter = retryAfter;
  }
}

/** 400: the body is not JSON, or not what the route takes (`field` says where). */
export class BadRequestError extends ApiError {}
/** 401: no key, an unknown or revoked key, an expired token. */
export class AuthenticationError extends ApiError {}
/** 403: a key of the wrong kind, or the admin API disabled. */
export class PermissionDeniedError extends ApiError {}
/** 404: an unknown session, agent, version or tenant; `unknown_agent`. */
export class NotFoundError extends ApiError {}
/** 408: the request body stalled. */
export class RequestTimeoutError extends ApiError {}
/** 409: nothing waits on that id, another agent's or identity's session, a current version, … */
export class ConflictError extends ApiError {}
/** 413: the body is over the tenant's limit. */
export class PayloadTooLargeError extends ApiError {}
/** 415: an agent upload that is neither WebAssembly nor JSON. */
export class UnsupportedMediaTypeError extends ApiError {}
/** 422: an invalid component, or an upload past a quota. */
export class UnprocessableError extends ApiError {}
/** 429: a limit of the tenant; the message names the setting. */
export class RateLimitError extends ApiError {}
/** 500: the server failed; its log says why. */
export class InternalServerError extends ApiError {}
/** 503: the server is shutting down or its store is unavailable. */
export class UnavailableError extends ApiError {}

/** The server could not be reached, or a stream not reconnected. */
export class ConnectionError extends SubsError {
  constructor(message, options) {
    super(message);
    if (options && "cause" in options) this.cause = options.cause;
  }
}

/** A stream sent what the client cannot read (an event too large, data not JSON). */
export class StreamError extends SubsError {}

const BY_STATUS = {
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
};

/**
 * The error for an answer with an error status: its JSON body read, or,
 * for a body that is not the API's (a proxy's page), the status and text.
 * @param {Response} response
 * @returns {Promise<ApiError>}
 */
export async function errorFrom(response) {
  const status = response.status;
  let text = "";
  try {
    text = await response.text();
  } catch {
    // The body broke off: the status still says what happened.
  }
  let code = `http_${status}`;
  let message = text.slice(0, 512).trim() || response.statusText || `HTTP ${status}`;
  let field;
  try {
    const body = JSON.parse(text);
    if (body && typeof body.code === "string") {
      code = body.code;
      message = String(body.error ?? "");
      field = typeof body.field === "string" ? body.field : undefined;
    }
  } catch {
    // Not the API's JSON: keep the text.
  }
  const header = response.headers.get("retry-after");
  const retryAfter = header !== null && header.trim() !== "" && !Number.isNaN(Number(header)) ? Number(header) : undefined;
  const Class = BY_STATUS[status] ?? ApiError;
  return new Class(status, code, message, field, retryAfter);
}
