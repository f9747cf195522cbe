// Native unit tests of agents (plain Node, no WebAssembly): RecordingHost,
// a host that keeps what the agent logged and streamed, and toolExecute to
// build the trigger of a tool call.

import { Context } from './agent.js';
import { messagesOf } from './branch.js';
import { requestFor } from './protocol.js';
import { jsonText } from './wit.js';

const REFUSAL = 'deltas are only accepted while answering an llm.execute trigger with stream: true';

/**
 * A host that records instead of talking to an engine: run a decision with
 * `decide` (a request object) or `decideJson` (a recorded request as JSON
 * text or parsed), then look at `logs` and `deltas`.
 */
export class RecordingHost {
  /** @param {{acceptDeltas?: boolean}} [options] */
  constructor({ acceptDeltas = true } = {}) {
    /** @type {Array<[string, string]>} every line logged, as [level, message] */
    this.logs = [];
    /** every delta streamed (and accepted), in order */
    this.deltas = [];
    /** whether emitDelta succeeds; the engine refuses deltas unless the decision answers a streaming llm.execute */
    this.acceptDeltas = acceptDeltas;
  }

  static refusingDeltas() {
    return new RecordingHost({ acceptDeltas: false });
  }

  log(level, message) {
    this.logs.push([level, message]);
  }

  emitDelta(delta) {
    if (!this.acceptDeltas) return REFUSAL;
    this.deltas.push(delta);
    return undefined;
  }

  /**
   * Runs `agent` on `request` with a context over this host; throws what
   * the agent throws. `request.messages` (and a `client.messages`
   * trigger's view) is made a `Messages` first, as a component's agent
   * gets it.
   */
  decide(agent, request) {
    messagesOf(request);
    return agent.decide(request, new Context(this));
  }

  /**
   * Runs `agent` on a request given as protocol JSON (text or parsed) and
   * returns the decision as protocol JSON, parsed: exactly what the engine
   * would read (`undefined` fields gone, non-finite numbers refused).
   */
  decideJson(agent, request) {
    // A branch or a view made by `messagesOf` is a proxy, which cannot be
    // cloned: its messages are.
    let plain = Array.isArray(request?.messages) ? { ...request, messages: Array.from(request.messages) } : request;
    const trigger = request?.trigger;
    if (trigger?.type === 'client.messages' && Array.isArray(trigger.messages)) {
      plain = { ...plain, trigger: { ...trigger, messages: Array.from(trigger.messages) } };
    }
    const parsed = typeof request === 'string' ? JSON.parse(request) : structuredClone(plain);
    return JSON.parse(jsonText(this.decide(agent, parsed)));
  }

  /** The text of all deltas, joined. */
  text() {
    return this.deltas.map((d) => d.text ?? '').join('');
  }
}

/**
 * A `tool.execute` trigger of `name` with `args` as the model wrote them
 * (call id `call-1`, first attempt), the input judged as the engine judges
 * it before the schema check: a JSON object is `valid`, anything else
 * `malformed`. Set `input` to test an `invalid` one.
 */
export function toolExecute(name, args, { id = 'call-1', attempt = 1 } = {}) {
  let input;
  try {
    const value = JSON.parse(args);
    input =
      value !== null && typeof value === 'object' && !Array.isArray(value)
        ? { status: 'valid', value }
        : { status: 'malformed', error: 'the arguments are not a JSON object' };
  } catch (e) {
    input = { status: 'malformed', error: e.message };
  }
  return { type: 'tool.execute', id, name, arguments: args, input, attempt };
}

/**
 * The request a ToolRouter gets when a person answers its approval of the
 * call `callId` of `tool` with `payload` (`{"approved": bool, "reason"?:
 * string}`): an `interrupt.resumed` with the call still pending.
 */
export function approvalResumed(callId, tool, payload) {
  return {
    ...requestFor({ type: 'interrupt.resumed', interrupt_id: callId, payload }),
    calls: [{ id: callId, kind: 'tool_call', status: 'pending', attempt: 1, name: tool }],
    pending_calls: 1,
  };
}
