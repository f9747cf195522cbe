// The component side: exportAgent makes an Agent the `decide` export of a
// componentize-js component, over the engine's `subs:agent/host` imports.
// The component may be built against either world: `agent-json` (what
// `examples/tools-js/build.sh` uses), where the request and the decision
// cross as JSON text that the runtime's native parser and writer handle,
// or `agent`, where they cross as WIT records that the bindings and
// wit.js convert in the interpreter, several times slower. Built against
// `subs:agent@0.2.0` (the default), `decide` also takes the branch as the
// engine's `messages` resource, which `request.messages` reads on demand
// (branch.js), as a `client.messages` trigger's view reads the messages it
// shares with the branch; built against `0.1.0`, the branch is in the
// request and the view in the trigger.
//
// componentize-js binds the world's exports to the module's exports by
// name, so an agent's entry module ends with:
//
//     export const decide = exportAgent(new MyAgent());

import { emitDelta as hostEmitDelta, log as hostLog } from '#host';

import { Context, DecideError } from './agent.js';
import { BranchError, clientView, lazyMessages, messagesOf } from './branch.js';
import {
  ProtocolError,
  branchRequestFromWit,
  fromWit,
  jsonText,
  messageTreeFromWit,
  requestFromWit,
  responseToWit,
  toWit,
  types,
} from './wit.js';

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
export function decideWit(agent, request, host, messages) {
  if (messages === undefined) return decideVia(agent, request, host, heldFromWit, responseToWit);
  return decideVia(agent, request, host, (r) => withBranch(branchRequestFromWit(r), witSource(messages)), responseToWit);
}

/**
 * The body of the `decide` export of the `agent-json` world: the request
 * as protocol JSON text in, the decision as JSON text out; errors as
 * {@link decideWit}'s. The engine reads the decision as it reads an HTTP
 * worker's, so a field that is not protocol fails the delivery with the
 * field named.
 */
export function decideJson(agent, text, host, messages) {
  if (messages === undefined) return decideVia(agent, text, host, heldFromJson, jsonText);
  return decideVia(agent, text, host, (t) => withBranch(JSON.parse(t), jsonSource(messages)), jsonText);
}

function heldFromWit(request) {
  const out = requestFromWit(request);
  messagesOf(out);
  return out;
}

function heldFromJson(text) {
  const out = JSON.parse(text);
  messagesOf(out);
  return out;
}

/**
 * `request` (without the branch) with `messages` read on demand from
 * `source`, `message_tree` read when it is first asked for, and a
 * `client.messages` trigger's view reading its shared messages through
 * `messages`.
 */
function withBranch(request, source) {
  const messages = lazyMessages(source);
  request.messages = messages;
  request.trigger = withView(request.trigger, messages);
  Object.defineProperty(request, 'message_tree', {
    configurable: true,
    enumerable: true,
    get() {
      const tree = messages.tree;
      Object.defineProperty(request, 'message_tree', { value: tree, writable: true, configurable: true, enumerable: true });
      return tree;
    },
    set(value) {
      Object.defineProperty(request, 'message_tree', { value, writable: true, configurable: true, enumerable: true });
    },
  });
  return request;
}

/**
 * A `client.messages` trigger as `0.1.0` has it (`messages` the whole
 * view, no `shared`), its first `shared` messages read through `branch`;
 * any other trigger as it is.
 */
function withView(trigger, branch) {
  if (trigger?.type !== 'client.messages') return trigger;
  const { type, shared = 0, messages, ...fields } = trigger;
  if (!Number.isInteger(shared) || shared < 0) throw new TypeError('trigger.shared: not a count of messages');
  if (!Array.isArray(messages)) throw new TypeError('trigger.messages: not an array');
  return { type, messages: clientView(branch, shared, messages), ...fields };
}

/**
 * `resource.method(...args)`; what the engine refuses (the resource's
 * decision is over), thrown as a BranchError with its reason.
 */
function read(resource, method, ...args) {
  try {
    return resource[method](...args);
  } catch (e) {
    throw new BranchError(`reading the branch (${method}): ${e?.payload ?? e?.message ?? e}`);
  }
}

/** The `messages` resource of the `agent` world as a branch source: WIT records converted. */
function witSource(resource) {
  const message = (m) => fromWit(types.Message, m);
  return {
    len: () => read(resource, 'len'),
    get: (i) => {
      const m = read(resource, 'get', i);
      return m === undefined || m === null ? undefined : message(m);
    },
    range: (start, end) => read(resource, 'range', start, end).map(message),
    last: (n) => read(resource, 'last', n).map(message),
    after: (id) => {
      const after = read(resource, 'after', id);
      return after === undefined || after === null ? null : after.map(message);
    },
    position: (id) => read(resource, 'position', id) ?? null,
    // The active nodes are the path's messages: read as a slice, they are
    // kept by index and the path does not count as read whole.
    tree: (path) => messageTreeFromWit(read(resource, 'tree'), path.slice(0, path.length)),
  };
}

/** The `messages` resource of the `agent-json` world as a branch source: JSON text parsed. */
function jsonSource(resource) {
  const range = (start, end) => JSON.parse(read(resource, 'rangeJson', start, end));
  return {
    len: () => read(resource, 'len'),
    get: (i) => range(i, i + 1)[0],
    range,
    // The world has no `last-json`: the length (kept) and one range.
    last: (n, branch) => {
      const len = branch.length;
      return range(Math.max(0, len - n), len);
    },
    after: (id) => {
      const after = read(resource, 'afterJson', id);
      return after === undefined || after === null ? null : JSON.parse(after);
    },
    position: (id) => read(resource, 'position', id) ?? null,
    tree: () => JSON.parse(read(resource, 'treeJson')),
  };
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
  // JSON text (`agent-json`) or a WIT record (`agent`), with the branch's
  // `messages` resource (`subs:agent@0.2.0`) or without (`0.1.0`).
  return function decide(request, messages) {
    if (typeof request === 'string') return decideJson(agent, request, componentHost, messages);
    return decideWit(agent, request, componentHost, messages);
  };
}
