// The component side: exportAgent makes an Agent the `decide` export of a
// componentize-js component, over the engine's `subs:agent/host` imports.
//
// componentize-js binds the world's exports to the module's exports by
// name, so an agent's entry module ends with:
//
//     export const decide = exportAgent(new MyAgent());

import { emitDelta as hostEmitDelta, log as hostLog } from '#host';

import { Context, DecideError } from './agent.js';
import { ProtocolError, requestFromWit, responseToWit, toWit, types } from './wit.js';

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
 * The body of the `decide` export: WIT request in, WIT decision out; throws
 * the WIT `decide-error` (`{message, retryable}`), which componentize-js
 * returns as the result's error. Takes the host as a parameter so that the
 * conversions are tested natively.
 */
export function decideWit(agent, request, host) {
  try {
    let proto;
    try {
      proto = requestFromWit(request);
    } catch (e) {
      throw new DecideError(`the engine sent a request the agent cannot read: ${e.message}`);
    }
    const decision = agent.decide(proto, new Context(host));
    if (decision !== null && typeof decision === 'object' && typeof decision.then === 'function') {
      throw new DecideError('decide returned a promise: decide runs synchronously');
    }
    try {
      return responseToWit(decision);
    } catch (e) {
      if (e instanceof ProtocolError) throw new DecideError(`the decision is not valid protocol: ${e.message}`);
      throw e;
    }
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
  return function decide(request) {
    return decideWit(agent, request, componentHost);
  };
}
