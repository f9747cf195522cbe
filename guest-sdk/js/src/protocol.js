// The protocol's values are its JSON: a DecisionRequest is the object
// `JSON.parse` makes of one, and a decision is an object that
// `JSON.stringify` writes as one. This module has the builders of the
// common values (the names of the Rust SDK's constructors) and JSON text
// that refuses what has no JSON form.

import { messagesOf } from './branch.js';
import { jsonText } from './wit.js';

/** `llm.call`; omitted fields come from the agent config. */
export function llmCall(fields = {}) {
  return { type: 'llm.call', ...fields };
}

/** `tool.call` of `name` with `arguments`. */
export function toolCall(name, args, fields = {}) {
  return { type: 'tool.call', ...pick(fields, 'id'), name, arguments: args, ...omit(fields, 'id') };
}

/** `tool.result` settling the call of the `tool.execute` answered. */
export function toolResult(result) {
  return { type: 'tool.result', result };
}

/** `tool.error` (terminal unless `retryable: true`) settling the call of the `tool.execute` answered. */
export function toolError(error, fields = {}) {
  return { type: 'tool.error', ...pick(fields, 'id', 'attempt'), error, ...omit(fields, 'id', 'attempt') };
}

/** `llm.result` settling the call of the `llm.execute` answered. */
export function llmResult(response) {
  return { type: 'llm.result', response };
}

/** `llm.error` settling the call of the `llm.execute` answered. */
export function llmError(error, fields = {}) {
  return { type: 'llm.error', ...pick(fields, 'id', 'attempt'), error, ...omit(fields, 'id', 'attempt') };
}

/** `interrupt`; the engine mints the id when it is omitted. */
export function interrupt(reason, payload, interruptId) {
  const action = { type: 'interrupt' };
  if (interruptId !== undefined) action.interrupt_id = interruptId;
  action.reason = reason;
  if (payload !== undefined && payload !== null) action.payload = payload;
  return action;
}

/** `done`, with `data` for clients when given. */
export function done(data) {
  return data === undefined || data === null ? { type: 'done' } : { type: 'done', data };
}

/** `done` carrying `data`. */
export function doneWith(data) {
  return { type: 'done', data };
}

/** `sub_agent.spawn`. */
export function subAgentSpawn(sessionId, agentId, toolCallId, fields = {}) {
  return { type: 'sub_agent.spawn', session_id: sessionId, agent_id: agentId, tool_call_id: toolCallId, ...fields };
}

/** `sub_agent.spawn` (the Rust SDK's `Action::spawn`). */
export function spawn(sessionId, agentId, toolCallId) {
  return subAgentSpawn(sessionId, agentId, toolCallId);
}

/** `interrupt` under the id `interruptId`, carrying `payload` for whoever resumes it. */
export function interruptWith(interruptId, reason, payload) {
  return { type: 'interrupt', interrupt_id: interruptId, reason, payload };
}

/**
 * `{"approved": bool, "reason"?: string}`: the `resume_schema` of an
 * approval, so that the engine refuses any other answer (a typo, a missing
 * `approved`) and keeps the approval open.
 */
export function approvalAnswerSchema() {
  return {
    type: 'object',
    properties: { approved: { type: 'boolean' }, reason: { type: 'string' } },
    required: ['approved'],
    additionalProperties: false,
  };
}

/**
 * The `interrupt` asking a person to approve the tool call `callId` of
 * `tool` with `args`: its id is the call id, its payload
 * `{"tool", "call_id", "arguments"}`, its `resume_schema`
 * `approvalAnswerSchema()`. A ToolRouter opens and answers these for the
 * tools that need approval.
 */
export function approval(callId, tool, args) {
  const action = interruptWith(callId, `approve ${tool}`, { tool, call_id: callId, arguments: args });
  action.resume_schema = approvalAnswerSchema();
  return action;
}

/**
 * The same decision with `actions` instead of its own (a new object): keep
 * what a proposal records (messages, state, config) and decide something
 * else.
 */
export function replaceActions(decision, actions) {
  const out = { ...decision };
  if (actions.length) out.actions = [...actions];
  else delete out.actions;
  return out;
}

/**
 * `decision` with a delegation to the sub-agent `agentId` added, `input`
 * being the child's first message: an assistant message calling `agentId`
 * (the call's arguments are `input`, verbatim) and the `sub_agent.spawn`
 * answering it, recorded together. The child's reply comes back as that
 * call's `tool` message (`sub_agent.finished`). `agentId` must be a
 * sub-agent of the config the decision runs under. The call and child
 * ids derive from the request's decision, so a redelivered request
 * delegates under the same ids. The decision is changed and returned.
 */
export function delegate(decision, request, agentId, input) {
  const n = (decision.actions ?? []).filter((a) => a.type === 'sub_agent.spawn').length + 1;
  const callId = boundedId(`delegate.${request.decision_id}.${n}`);
  const sessionId = boundedId(`${request.session_id}.${callId}`);
  withMessage(decision, {
    role: 'assistant',
    tool_calls: [{ id: callId, type: 'function', function: { name: agentId, arguments: input } }],
  });
  return withAction(decision, spawn(sessionId, agentId, callId));
}

const MAX_ID_BYTES = 256;

/**
 * `id` when it is a valid id (1 to 256 bytes, no control characters), else
 * a short one derived from it with FNV-1a, which is stable everywhere and
 * the same as the Rust SDK's, since a redelivery must find the same ids.
 */
function boundedId(id) {
  const bytes = new TextEncoder().encode(id);
  // eslint-disable-next-line no-control-regex
  if (bytes.length > 0 && bytes.length <= MAX_ID_BYTES && !/[\u0000-\u001f\u007f-\u009f]/u.test(id)) return id;
  let h = 0xcbf29ce484222325n;
  for (const b of bytes) h = BigInt.asUintN(64, (h ^ BigInt(b)) * 0x100000001b3n);
  return `delegate.${h.toString(16).padStart(16, '0')}`;
}

/** `message.send`. */
export function messageSend(sessionId, message) {
  return { type: 'message.send', session_id: sessionId, message };
}

/** Messages to record: `DraftMessage.user('hi')`. */
export const DraftMessage = Object.freeze({
  user: (text) => ({ role: 'user', content: text }),
  assistant: (text) => ({ role: 'assistant', content: text }),
  system: (text) => ({ role: 'system', content: text }),
  tool: (toolCallId, text) => ({ role: 'tool', content: text, tool_call_id: toolCallId }),
});

/** The text of a message's content: text parts joined by newlines. */
export function messageText(message) {
  const content = message?.content;
  if (content === undefined || content === null) return '';
  if (typeof content === 'string') return content;
  return content.filter((p) => p.type === 'text').map((p) => p.text).join('\n');
}

/**
 * `decision` with `action` added (the decision is changed and returned).
 * A decision's lists are created as needed.
 */
export function withAction(decision, action) {
  (decision.actions ??= []).push(action);
  return decision;
}

/** `decision` with `message` added to the messages it records. */
export function withMessage(decision, message) {
  (decision.messages ??= []).push(message);
  return decision;
}

/**
 * A minimal request for `trigger`, as in the Rust SDK: session `session`,
 * agent `agent`, no config, no messages, `null` state, first delivery.
 * `fields` replaces any of them; `messages` (an array) becomes a
 * `Messages` with the request's `message_tree`.
 */
export function requestFor(trigger, fields = {}) {
  const request = {
    session_id: 'session',
    decision_id: 'decision',
    agent_id: 'agent',
    identity: {},
    trigger,
    proposed: {},
    state: null,
    agent: null,
    calls: [],
    pending_calls: 0,
    messages: [],
    message_tree: { nodes: [] },
    ancestry: [],
    attempts: 1,
    deadline: null,
    turn_id: null,
    ...fields,
  };
  // `messages` as agent code gets it in a component: a Messages.
  messagesOf(request);
  return request;
}

/**
 * `x` as JSON writes a JavaScript number (JavaScript has one number type,
 * so `1 + 2` is `3` already); non-finite numbers have no JSON form and
 * throw.
 */
export function jsNumber(x) {
  if (!Number.isFinite(x)) throw new RangeError(`${x} is not a JSON number`);
  return x;
}

/** Compact JSON text; fails on non-finite numbers instead of writing `null`. */
export function toJson(value) {
  return jsonText(value);
}

function pick(obj, ...keys) {
  const out = {};
  for (const k of keys) if (obj[k] !== undefined) out[k] = obj[k];
  return out;
}

function omit(obj, ...keys) {
  const out = { ...obj };
  for (const k of keys) delete out[k];
  return out;
}
