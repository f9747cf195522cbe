// Tools an agent runs itself: declared with `tool()` (JSON Schemas given
// explicitly, or built with the `s` helpers), run for `tool.execute` by a
// ToolRouter with the same error texts as the Rust SDK's.

import { Context, DecideError } from './agent.js';
import { approval, toolError, toolResult } from './protocol.js';
import { jsonText, unexpected } from './wit.js';

const OPTIONAL = Symbol('optional');

function withExtra(schema, extra) {
  if (typeof extra === 'string') return { ...schema, description: extra };
  return { ...schema, ...extra };
}

/**
 * Small builders of JSON Schemas, written in the order a hand-written one
 * would be: `s.number('The first addend')` is
 * `{"type": "number", "description": "The first addend"}`,
 * `s.integer({minimum: 0})` is `{"type": "integer", "minimum": 0}`.
 * `s.object({...})` makes every property `required` unless wrapped in
 * `s.optional`, and allows no others.
 */
export const s = Object.freeze({
  number: (extra = {}) => withExtra({ type: 'number' }, extra),
  integer: (extra = {}) => withExtra({ type: 'integer' }, extra),
  string: (extra = {}) => withExtra({ type: 'string' }, extra),
  boolean: (extra = {}) => withExtra({ type: 'boolean' }, extra),
  array: (items, extra = {}) => withExtra({ type: 'array', items }, extra),
  enum: (values, extra = {}) => withExtra({ type: 'string', enum: values }, extra),
  object(properties = {}, extra = {}) {
    const props = {};
    const required = [];
    for (const [name, schema] of Object.entries(properties)) {
      if (schema && schema[OPTIONAL]) {
        props[name] = schema[OPTIONAL];
      } else {
        props[name] = schema;
        required.push(name);
      }
    }
    const schema = { type: 'object', properties: props };
    if (required.length) schema.required = required;
    schema.additionalProperties = false;
    return withExtra(schema, extra);
  },
  /** A property `s.object` does not require. */
  optional: (schema) => ({ [OPTIONAL]: schema }),
});

// ---- checking arguments against a schema -----------------------------------

class ArgumentError extends Error {
  constructor(reason, path = '') {
    super(path ? `${path}: ${reason}` : reason);
    this.reason = reason;
    this.path = path;
  }

  within(part) {
    const path = !this.path ? part : this.path.startsWith('[') ? part + this.path : `${part}.${this.path}`;
    return new ArgumentError(this.reason, path);
  }
}

const EXPECTED = {
  number: 'f64',
  integer: 'i64',
  string: 'a string',
  boolean: 'a boolean',
  array: 'a sequence',
  object: 'a map',
  null: 'null',
};

function typeMatches(type, value) {
  switch (type) {
    case 'number':
      return typeof value === 'number';
    case 'integer':
      return Number.isInteger(value);
    case 'string':
      return typeof value === 'string';
    case 'boolean':
      return typeof value === 'boolean';
    case 'array':
      return Array.isArray(value);
    case 'object':
      return value !== null && typeof value === 'object' && !Array.isArray(value);
    case 'null':
      return value === null;
    default:
      return true;
  }
}

/**
 * Checks `value` against the parts of a JSON Schema that say what shape a
 * value has (`type`, `properties`, `required`, `items`, `enum`), with
 * errors in serde's words (`b: invalid type: string "2", expected f64`).
 * The engine has already validated the arguments against the whole
 * schema; this keeps a tool from running on arguments it cannot read
 * should they get through anyway.
 */
export function check(schema, value) {
  if (!schema || typeof schema !== 'object') return;
  if (schema.type !== undefined) {
    const types = Array.isArray(schema.type) ? schema.type : [schema.type];
    if (!types.some((t) => typeMatches(t, value))) {
      throw new ArgumentError(`invalid type: ${unexpected(value)}, expected ${types.map((t) => EXPECTED[t] ?? t).join(' or ')}`);
    }
  }
  if (Array.isArray(schema.enum) && !schema.enum.some((v) => JSON.stringify(v) === JSON.stringify(value))) {
    throw new ArgumentError(
      `unknown variant ${JSON.stringify(value)}, expected one of ${schema.enum.map((v) => `\`${v}\``).join(', ')}`,
    );
  }
  if (value !== null && typeof value === 'object' && !Array.isArray(value)) {
    for (const name of schema.required ?? []) {
      if (!(name in value)) throw new ArgumentError(`missing field \`${name}\``);
    }
    for (const [name, sub] of Object.entries(schema.properties ?? {})) {
      if (name in value) {
        try {
          check(sub, value[name]);
        } catch (e) {
          throw e instanceof ArgumentError ? e.within(name) : e;
        }
      }
    }
  }
  if (Array.isArray(value) && schema.items) {
    value.forEach((item, i) => {
      try {
        check(schema.items, item);
      } catch (e) {
        throw e instanceof ArgumentError ? e.within(`[${i}]`) : e;
      }
    });
  }
}

// ---- tools ---------------------------------------------------------------------

/**
 * A tool: its declaration (what the model sees: `name`, `description`,
 * `input` and `output` JSON Schemas, `handler`) and its code, which gets
 * the arguments and a ToolContext (the call's `id`, `attempt`, `deadline`,
 * the session's `state` to read and write, the `identity`, logging) and
 * returns the result (any JSON) or throws. A tool declared without `input`
 * takes no arguments: the engine finds a call with any `invalid` (declare
 * `{type: 'object'}` to take any object).
 *
 * `needsApproval` (`true`, or a function of the arguments deciding per
 * call) makes a ToolRouter ask a person before the tool runs: see
 * `ToolRouter.handle`.
 *
 * @param {{name: string, description?: string, input?: object, output?: object, handler?: 'worker' | 'client', needsApproval?: boolean | ((args: any) => boolean)}} declaration
 * @param {(args: any, ctx: ToolContext) => unknown} run
 */
export function tool(declaration, run) {
  if (!declaration || typeof declaration.name !== 'string') throw new TypeError('a tool needs a name');
  if (typeof run !== 'function') throw new TypeError(`the tool \`${declaration.name}\` needs a function`);
  const { name, description, input, output, handler, needsApproval } = declaration;
  const decl = { name };
  if (description !== undefined) decl.description = description;
  if (input !== undefined) decl.input = input;
  if (output !== undefined) decl.output = output;
  if (handler !== undefined) decl.handler = handler;
  let approvalGate;
  if (needsApproval === true) approvalGate = () => true;
  else if (typeof needsApproval === 'function') approvalGate = needsApproval;
  else if (needsApproval !== undefined && needsApproval !== false) {
    throw new TypeError(`the tool \`${name}\`: needsApproval is true, false or a function of the arguments`);
  }
  return Object.freeze({ declaration: Object.freeze(decl), run, approval: approvalGate });
}

/**
 * The key of the agent state under which a ToolRouter keeps the answers to
 * its approvals until the calls' `tool.execute`: call id → `true`
 * (approved) or the reason of a denial. Handlers never see it.
 */
export const APPROVALS_STATE_KEY = 'subs_approvals';

const NO_HOST = Object.freeze({ log() {}, emitDelta: () => 'no engine: the tool runs without its request' });

/**
 * What a tool's code sees of its call and session: the `tool.execute`
 * trigger's fields (`id`, `name`, `arguments`, `input`, `attempt`,
 * `deadline`), `callId`, the session's `state` (read it, change it, or
 * assign a new one: what it holds after the tool becomes the session's
 * state, whether the tool returns or throws; `null` before the agent
 * wrote any), the session owner's `identity`, the whole `request`, and
 * logging (`log`, `info`, ...) to the engine's logs.
 */
export class ToolContext extends Context {
  constructor(call, { request, state = null, host = NO_HOST } = {}) {
    super(host);
    this.call = call;
    this.id = call.id;
    this.callId = call.id;
    this.name = call.name;
    this.arguments = call.arguments;
    this.input = call.input;
    this.attempt = call.attempt;
    if (call.deadline !== undefined) this.deadline = call.deadline;
    this.request = request;
    this.identity = request?.identity ?? {};
    this.state = state;
  }
}

/**
 * The tools an agent runs itself, by name, in the order added (the order
 * the model sees them in), and the sub-agents the model may call.
 * `execute` settles a `tool.execute` call:
 *
 * - `valid` input that fits the input schema runs the tool: what it
 *   returns is a `tool.result`, what it throws a `tool.error` carrying the
 *   error's message (a DecideError fails the whole decision instead);
 * - input that does not fit (the field is named), or that the engine found
 *   `invalid` or `malformed`, is a `tool.error` that says what is wrong,
 *   without running the tool;
 * - a tool the router does not know is a `tool.error` naming it.
 *
 * Errors are terminal: the model reads them and may call again.
 * `handle(request, cx)` decides a whole request (approvals included); a
 * router is an agent whose `decide` is `handle`.
 */
export class ToolRouter {
  /** @param {Array<ReturnType<typeof tool>>} [tools] */
  constructor(tools = []) {
    this.routes = [];
    this.subAgentList = [];
    for (const t of tools) this.add(t);
  }

  /** Adds a tool made by `tool()`; a second tool of one name is an error. */
  add(t) {
    if (this.handles(t.declaration.name)) {
      throw new Error(`the tool \`${t.declaration.name}\` was added to the ToolRouter twice`);
    }
    this.routes.push(t);
    return this;
  }

  /** `add(tool(declaration, run))`. */
  tool(declaration, run) {
    return this.add(tool(declaration, run));
  }

  /**
   * Adds the agent `id` as a tool the model may call (described to it by
   * `description`): the engine runs a call of it as a child session of
   * that agent, and the child's reply is the call's result. The agent must
   * be registered with the engine under `id`.
   */
  subAgent(id, description) {
    const sub = { id };
    if (description !== undefined) sub.description = description;
    this.subAgentList.push(sub);
    return this;
  }

  /** The declarations, in order: what the agent puts in its config. */
  tools() {
    return this.routes.map((r) => ({ ...r.declaration }));
  }

  /** The sub-agents the model may call, in the order added. */
  subAgents() {
    return this.subAgentList.map((s) => ({ ...s }));
  }

  /** `config` with the router's tools and sub-agents added (a new object). */
  configure(config) {
    return {
      ...config,
      tools: [...(config.tools ?? []), ...this.tools()],
      sub_agents: [...(config.sub_agents ?? []), ...this.subAgents()],
    };
  }

  /** The declaration of the tool named `name`. */
  get(name) {
    return this.find(name)?.declaration;
  }

  /** Whether the router runs a tool named `name`. */
  handles(name) {
    return this.find(name) !== undefined;
  }

  /** Whether a call of `name` with `args` needs approval. */
  needsApprovalFor(name, args) {
    const gate = this.find(name)?.approval;
    if (gate === undefined) return false;
    try {
      return gate(args) !== false;
    } catch {
      // A gate that cannot read the arguments asks: an approval fails closed.
      return true;
    }
  }

  /**
   * The `tool.result` or `tool.error` that settles `call` (a `tool.execute`
   * trigger). The action leaves `id` and `attempt` out: the engine takes
   * them from the `tool.execute` being answered. Run this way, the tool's
   * context has a `null` state (its changes are dropped), no identity, and
   * its log lines go nowhere; `handle` runs it with its session's.
   */
  execute(call) {
    return this.run(new ToolContext(call));
  }

  /**
   * For a `tool.execute` trigger, `handle`'s decision (the call settled,
   * with the state its tool left); `undefined` for every other trigger.
   */
  decide(request, cx) {
    if (request.trigger.type !== 'tool.execute') return undefined;
    return this.handle(request, cx);
  }

  /**
   * The decision for `request`, taking the engine's proposal for all that
   * is not the router's:
   *
   * - `tool.execute`: the call run with the session's state, identity and
   *   logs, and the state its tool left; a call of a tool needing approval
   *   runs only when its approval was recorded, else it is settled with
   *   `tool.error` "denied by the approver: <reason>" and never runs;
   * - `interrupt.resumed` of an approval this router asked for: nothing
   *   when approved (the call starts), else a `tool.error` settling the
   *   call with the reason (or, while the call is still queued, the denial
   *   kept in state for its `tool.execute`);
   * - any other: `proposed`, with an approval asked for each call of a
   *   gated tool in it (see `gate`).
   */
  handle(request, cx) {
    const host = cx?.host ?? NO_HOST;
    const trigger = request.trigger;
    const proposed = request.proposed ?? {};
    if (trigger.type === 'tool.execute') {
      const before = request.state ?? null;
      const { state, answers } = takeAnswers(before);
      const ctx = new ToolContext(trigger, { request, state, host });
      let action;
      if (this.needsApprovalFor(trigger.name, executeArguments(trigger))) {
        // A gated call runs only on a recorded approval: a denial, or a
        // record lost with the state, denies.
        const answer = answers[trigger.id];
        delete answers[trigger.id];
        if (answer === true) action = this.run(ctx);
        else if (typeof answer === 'string') action = toolError(denial(answer));
        else action = toolError(denial('no approval of this call was recorded'));
      } else {
        action = this.run(ctx);
      }
      const after = keepCleared(putAnswers(ctx.state, answers), before);
      const decision = { ...proposed, actions: [...(proposed.actions ?? []), action] };
      if (!sameJson(after, before)) decision.state = after;
      return decision;
    }
    if (trigger.type === 'interrupt.resumed') {
      const found = this.answer(request, trigger);
      if (found === undefined) return proposed;
      const { call, approved, reason } = found;
      const id = trigger.interrupt_id;
      const before = request.state ?? null;
      const { state, answers } = takeAnswers(before);
      const decision = { ...proposed };
      if (approved) {
        host.log('info', `the call \`${id}\` of \`${call.name}\` was approved`);
        answers[id] = true;
      } else {
        host.log('info', `the call \`${id}\` of \`${call.name}\` was denied: ${reason}`);
        if (call.status === 'queued') {
          // Still held behind another open approval: the engine refuses to
          // settle it before it starts, so the denial waits in the state
          // for its `tool.execute`.
          answers[id] = reason;
        } else {
          decision.actions = [...(proposed.actions ?? []), toolError(denial(reason), { id })];
        }
      }
      const after = keepCleared(putAnswers(state, answers), before);
      if (!sameJson(after, before)) decision.state = after;
      return decision;
    }
    return this.gate(request, proposed);
  }

  /**
   * `decision` with an approval `interrupt` after each `tool.call` of a
   * tool that needs one. A call without an id gets one (derived from the
   * request's decision), since the approval names it. An agent that
   * builds its own decisions passes them through this to keep its gates.
   */
  gate(request, decision) {
    const actions = decision.actions ?? [];
    const gated = (a) => a.type === 'tool.call' && this.needsApprovalFor(a.name, a.arguments);
    if (!actions.some(gated)) return decision;
    const asked = new Set(actions.filter((a) => a.type === 'interrupt' && a.interrupt_id).map((a) => a.interrupt_id));
    const out = [];
    actions.forEach((action, i) => {
      if (!gated(action)) {
        out.push(action);
        return;
      }
      const call = action.id === undefined ? { ...action, id: `approve.${request.decision_id}.${i}` } : action;
      out.push(call);
      if (!asked.has(call.id)) out.push(approval(call.id, call.name, call.arguments));
    });
    return { ...decision, actions: out };
  }

  /**
   * The call the approval `resumed` answers and the answer; `undefined`
   * when it is not an approval of a call of this router still open.
   */
  answer(request, resumed) {
    const call = (request.calls ?? []).find((c) => c.id === resumed.interrupt_id);
    if (call === undefined || call.kind !== 'tool_call' || call.status === 'completed' || call.status === 'failed') {
      return undefined;
    }
    if (typeof call.name !== 'string' || this.find(call.name)?.approval === undefined) return undefined;
    const NOT_AN_ANSWER = 'the answer was not {"approved": true|false}';
    // Anything but an explicit `"approved": true` denies: an approval
    // fails closed.
    const p = resumed.payload;
    if (p === null || typeof p !== 'object' || Array.isArray(p)) return { call, approved: false, reason: NOT_AN_ANSWER };
    if (p.approved === true) return { call, approved: true, reason: '' };
    if (p.approved === false) return { call, approved: false, reason: typeof p.reason === 'string' ? p.reason : '' };
    return { call, approved: false, reason: NOT_AN_ANSWER };
  }

  /** Runs the call of `ctx`. */
  run(ctx) {
    const call = ctx.call;
    const route = this.find(call.name);
    if (route === undefined) return toolError(this.unknown(call.name));
    const input = call.input;
    if (input.status === 'invalid') return toolError(`invalid arguments for \`${call.name}\`: ${input.error}`);
    if (input.status === 'malformed') return toolError(`malformed arguments for \`${call.name}\`: ${input.error}`);
    try {
      check(route.declaration.input ?? { type: 'object' }, input.value);
    } catch (e) {
      if (e instanceof ArgumentError) return toolError(`invalid arguments for \`${call.name}\`: ${e.message}`);
      throw e;
    }
    let result;
    try {
      result = route.run(input.value, ctx);
    } catch (e) {
      if (e instanceof DecideError) throw e;
      return toolError(e instanceof Error ? e.message || e.name : String(e));
    }
    if (result !== null && typeof result === 'object' && typeof result.then === 'function') {
      return toolError(`the tool \`${call.name}\` returned a promise: tools run synchronously`);
    }
    if (result === undefined) result = null;
    try {
      jsonText(result);
    } catch (e) {
      return toolError(`the result of \`${call.name}\` is not JSON: ${e.message}`);
    }
    return toolResult(result);
  }

  find(name) {
    return this.routes.find((r) => r.declaration.name === name);
  }

  unknown(name) {
    if (this.routes.length === 0) return `unknown tool \`${name}\`: this agent runs no tools`;
    const known = this.routes.map((r) => `\`${r.declaration.name}\``).join(', ');
    return `unknown tool \`${name}\`: this agent runs ${known}`;
  }
}

function isObject(v) {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}

/**
 * A copy of `state` without the approval answers, and the answers: the
 * answers alone made a `null` state an object, so it is `null` again for
 * the tools.
 */
function takeAnswers(state) {
  if (!isObject(state)) return { state: state === null ? null : structuredClone(state), answers: {} };
  const { [APPROVALS_STATE_KEY]: kept, ...rest } = structuredClone(state);
  const answers = isObject(kept) ? kept : {};
  return { state: Object.keys(rest).length === 0 && kept !== undefined ? null : rest, answers };
}

/** `state` with the answers put back (none when none are left); a state that is neither an object nor null cannot hold them. */
function putAnswers(state, answers) {
  if (Object.keys(answers).length === 0) return state ?? null;
  if (state === null || state === undefined) return { [APPROVALS_STATE_KEY]: answers };
  if (isObject(state)) return { ...state, [APPROVALS_STATE_KEY]: answers };
  return state;
}

/** `{}` for a state that became `null`: a decision's `null` state keeps the session's, which would keep approval answers already used. */
function keepCleared(state, before) {
  return state === null && before !== null ? {} : state;
}

function sameJson(a, b) {
  return JSON.stringify(a) === JSON.stringify(b);
}

/** The arguments of a `tool.execute` as its `tool.call` had them: the parsed value, or the raw text when it did not parse. */
function executeArguments(call) {
  return call.input.status === 'malformed' ? call.arguments : call.input.value;
}

/** The error a denied call is settled with: what the model reads. */
function denial(reason) {
  return reason ? `denied by the approver: ${reason}` : 'denied by the approver';
}
