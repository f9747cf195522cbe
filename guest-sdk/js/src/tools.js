// Tools an agent runs itself: declared with `tool()` (JSON Schemas given
// explicitly, or built with the `s` helpers), run for `tool.execute` by a
// ToolRouter with the same error texts as the Rust SDK's.

import { DecideError } from './agent.js';
import { toolError, toolResult } from './protocol.js';
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
 * the arguments and the `tool.execute` trigger (`id`, `attempt`,
 * `deadline`) and returns the result (any JSON) or throws. A tool declared
 * without `input` takes no arguments: the engine finds a call with any
 * `invalid` (declare `{type: 'object'}` to take any object).
 *
 * @param {{name: string, description?: string, input?: object, output?: object, handler?: 'worker' | 'client'}} declaration
 * @param {(args: any, call: any) => unknown} run
 */
export function tool(declaration, run) {
  if (!declaration || typeof declaration.name !== 'string') throw new TypeError('a tool needs a name');
  if (typeof run !== 'function') throw new TypeError(`the tool \`${declaration.name}\` needs a function`);
  const { name, description, input, output, handler } = declaration;
  const decl = { name };
  if (description !== undefined) decl.description = description;
  if (input !== undefined) decl.input = input;
  if (output !== undefined) decl.output = output;
  if (handler !== undefined) decl.handler = handler;
  return Object.freeze({ declaration: Object.freeze(decl), run });
}

/**
 * The tools an agent runs itself, by name, in the order added (the order
 * the model sees them in). `execute` settles a `tool.execute` call:
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
 */
export class ToolRouter {
  /** @param {Array<ReturnType<typeof tool>>} [tools] */
  constructor(tools = []) {
    this.routes = [];
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

  /** The declarations, in order: what the agent puts in its config. */
  tools() {
    return this.routes.map((r) => ({ ...r.declaration }));
  }

  /** The declaration of the tool named `name`. */
  get(name) {
    return this.find(name)?.declaration;
  }

  /** Whether the router runs a tool named `name`. */
  handles(name) {
    return this.find(name) !== undefined;
  }

  /**
   * The `tool.result` or `tool.error` that settles `call` (a `tool.execute`
   * trigger). The action leaves `id` and `attempt` out: the engine takes
   * them from the `tool.execute` being answered.
   */
  execute(call) {
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
      result = route.run(input.value, call);
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

  /**
   * For a `tool.execute` trigger, `proposed` with the settling action
   * added; `undefined` for every other trigger.
   */
  decide(request) {
    if (request.trigger.type !== 'tool.execute') return undefined;
    const decision = request.proposed ?? {};
    (decision.actions ??= []).push(this.execute(request.trigger));
    return decision;
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
