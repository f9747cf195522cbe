// The component side: exportAgent makes an Agent the `decide` export of a
// componentize-js component, over the engine's `subs:agent/host` imports.
// The component may be built against either world: `agent-json` (what
// `examples/tools-js/build.sh` uses), where the request and the decision
// cross as JSON text that the runtime's native parser and writer handle,
// or `agent`, where they cross as WIT records that the bindings and
// wit.js convert in the interpreter, several times slower.
//
// componentize-js binds the world's exports to the module's exports by
// name, so an agent's entry module ends with:
//
//     export const decide = exportAgent(new MyAgent());

import { emitDelta as hostEmitDelta, log as hostLog } from '#host';

import { Context, DecideError } from './agent.js';
import { ProtocolError, jsonText, requestFromWit, responseToWit, toWit, types } from './wit.js';

/** The host of an agent running as a component: the engine's imports. */
export const componentHost = Object.freeze({
  log(level, message) {
    hostLog(level, message);
  },
  emitDelta(delta) {
    try {
      hostEmitDelta(toWit(types.StreamDelta, delta));
    } catch (e) {
      if (e instanceof ProtocolError) throw e;
      return String(e?.payload ?? e?.message ?? e);
    }
    return undefined;
  },
});

/**
 * The body of the `decide` export of the `agent` world: WIT request in,
 * WIT decision out; throws the WIT `decide-error` (`{message, retryable}`),
 * which componentize-js returns as the result's error. Takes the host as a
 * parameter so that the conversions are tested natively.
 */
export function decideWit(agent, request, host) {
  return decideVia(agent, request, host, requestFromWit, responseToWit);
}

/**
 * The body of the `decide` export of the `agent-json` world: the request
 * as protocol JSON text in, the decision as JSON text out; errors as
 * {@link decideWit}'s. The engine reads the decision as it reads an HTTP
 * worker's, so a field that is not protocol fails the delivery with the
 * field named.
 */
export function decideJson(agent, text, host) {
  return decideVia(agent, text, host, JSON.parse, jsonText);
}

/**
 * `agent`'s decision on `input`, read by `read` and written by `write`;
 * what goes wrong, thrown as the WIT `decide-error`.
 */
function decideVia(agent, input, host, read, write) {
  return failing(() => {
    let request;
    try {
      request = read(input);
    } catch (e) {
      throw new DecideError(`the engine sent a request the agent cannot read: ${e.message}`);
    }
    const decision = agent.decide(request, new Context(host));
    if (decision !== null && typeof decision === 'object' && typeof decision.then === 'function') {
      throw new DecideError('decide returned a promise: decide runs synchronously');
    }
    try {
      return write(decision);
    } catch (e) {
      if (!(e instanceof ProtocolError)) throw e;
      throw new DecideError(`the decision is not valid protocol: ${named(decision, e).message}`);
    }
  });
}

/**
 * `e`, or where `decision` is not protocol named by the WIT mapping, which
 * checks every field (the JSON writer cannot say where a value was).
 */
function named(decision, e) {
  if (e.path) return e;
  try {
    responseToWit(decision);
  } catch (w) {
    if (w instanceof ProtocolError) return w;
  }
  return e;
}

/** `body()`, with what it throws as the WIT `decide-error`. */
function failing(body) {
  try {
    return body();
  } catch (e) {
    if (e instanceof DecideError) throw { message: e.message, retryable: e.retryable };
    // A bug in the agent: fail the delivery, terminally, with the stack on
    // stderr for the engine's logs.
    console.error(e?.stack ?? String(e));
    const message = e instanceof Error ? `${e.name}: ${e.message}` : String(e);
    throw { message, retryable: false };
  }
}

/**
 * The `decide` function to export from the component's entry module,
 * deciding with `agent`. The agent object is made when the component is
 * built (componentize-js snapshots the module after running it) and serves
 * every decision; each decision runs in a fresh instance, so nothing it
 * changes lasts: keep what must last in the session's `state`.
 */
export function exportAgent(agent) {
  if (!agent || typeof agent.decide !== 'function') throw new TypeError('exportAgent takes an agent: an object with decide()');
  // The world the component was built against decides what arrives:
  // JSON text (`agent-json`) or a WIT record (`agent`).
  return function decide(request) {
    if (typeof request === 'string') return decideJson(agent, request, componentHost);
    return decideWit(agent, request, componentHost);
  };
}
