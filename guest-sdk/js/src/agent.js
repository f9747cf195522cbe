// The Agent base class, the Context an agent decides with, and DecideError.

/**
 * A decision the agent could not make. Throwing it fails this delivery:
 * when `retryable`, the engine delivers the same request again per the
 * agent's retry policy; otherwise the turn fails.
 *
 * Any other exception thrown by `decide` fails the delivery the same way,
 * terminally, with the exception's name and message (and its stack on
 * stderr, which the engine logs).
 */
export class DecideError extends Error {
  /**
   * @param {string} message
   * @param {{retryable?: boolean}} [options]
   */
  constructor(message, { retryable = false } = {}) {
    super(message);
    this.name = 'DecideError';
    this.retryable = retryable;
  }

  /** An error that delivering the request again would not fix. */
  static terminal(message) {
    return new DecideError(message, { retryable: false });
  }

  /** An error that may go away on another delivery. */
  static retryable(message) {
    return new DecideError(message, { retryable: true });
  }
}

/** How much a log line matters. */
export const Level = Object.freeze({
  TRACE: 'trace',
  DEBUG: 'debug',
  INFO: 'info',
  WARN: 'warn',
  ERROR: 'error',
});

const LEVELS = new Set(Object.values(Level));

/**
 * What the engine offers an agent during one decision: logging, and
 * streaming the reply of an `llm.execute` it answers. `console.log` and
 * `console.error` work too: a component's stdout and stderr go to the
 * engine's logs.
 */
export class Context {
  /** @param {import('./index.js').Host} host */
  constructor(host) {
    this.host = host;
  }

  /** Writes a line to the engine's logs at `level`. */
  log(level, message) {
    if (!LEVELS.has(level)) throw new TypeError(`unknown log level ${JSON.stringify(level)}`);
    this.host.log(level, String(message));
  }

  trace(message) {
    this.log('trace', message);
  }

  debug(message) {
    this.log('debug', message);
  }

  info(message) {
    this.log('info', message);
  }

  warn(message) {
    this.log('warn', message);
  }

  error(message) {
    this.log('error', message);
  }

  /**
   * Streams a piece of the reply of the `llm.execute` being answered (one
   * with `stream: true`); clients see it at once. The final `llm.result`
   * must still carry the whole reply. Throws a terminal DecideError with
   * the engine's reason when the decision answers no such trigger.
   */
  emitDelta(delta) {
    const refused = this.host.emitDelta(delta);
    if (refused !== undefined && refused !== null) throw new DecideError(refused);
  }

  /** Streams a piece of reply text; see emitDelta. */
  emitText(text) {
    this.emitDelta({ text });
  }
}

/**
 * An agent: decides what happens next whenever the engine asks. The
 * default `decide` accepts the engine's proposal, so an empty subclass is a
 * complete chat agent.
 */
export class Agent {
  /**
   * Decides what happens next for `request.trigger`. `request.proposed` is
   * what an ordinary agent loop would do: return it, change it, or decide
   * something else. It is empty when only the agent knows what to do
   * (`tool.execute`, `llm.execute`, `client.action`, `interrupt.resumed`).
   * Throw a DecideError to fail the delivery.
   */
  decide(request, _cx) {
    return request.proposed;
  }
}
