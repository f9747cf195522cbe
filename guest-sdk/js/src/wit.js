// The mapping between the protocol (its JSON, which is what JavaScript
// agents work with) and the WIT types of `subs:agent`, as componentize-js
// and jco represent them (the types in `types/wit/`).
//
// The JavaScript twin of `engine/protocol/src/wit.rs`. Both sides have the
// same shapes, so the mapping is one table of the protocol's types, read in
// both directions; only the places where WIT and JSON differ are written
// out:
//
// - field names are snake_case in JSON, camelCase in WIT;
// - every value of any JSON crosses as JSON text;
// - enums: `retry_scheduled` in JSON is `retry-scheduled` in WIT;
// - unions tagged by `type` (`status` for tool input) are WIT variants,
//   `{tag: 'tool-result', val: {...}}`; a message's content is
//   `{tag: 'text', val}` or `{tag: 'parts', val: [...]}`;
// - optional fields are omitted in JSON (`null` only where the protocol
//   says so: a request's `agent`, `deadline`, `turn_id`, a retry policy's
//   `timeout_secs`) and `undefined` in WIT;
// - `ToolCall.type` is the WIT field `kind`; `tool.error` and `llm.error`
//   share the record `call-error`; `WorkerIdentity.metadata` is a list of
//   pairs;
// - an `llm.execute` request is `standard(llm-request)` when the typed
//   record holds it exactly (and no `format` is set), else `native(json)`;
//   an `llm.result` response likewise;
// - a request's `message_tree` does not repeat the active path: a node's
//   message is `active(i)` (`messages[i]`) or `other(message)`, its parent
//   `root`, `node(j)` (an earlier node) or `id(string)`.
//
// The mapping is lossless both ways.

/** A value that is not what the protocol says; `path` names the field. */
export class ProtocolError extends Error {
  /**
   * @param {string} message
   * @param {string} [path]
   */
  constructor(message, path = '') {
    super(path ? `${path}: ${message}` : message);
    this.name = 'ProtocolError';
    this.reason = message;
    this.path = path;
  }

  /** @param {string} name */
  inField(name) {
    return new ProtocolError(this.reason, join(name, this.path));
  }

  /** @param {number} index */
  inIndex(index) {
    return new ProtocolError(this.reason, join(`[${index}]`, this.path));
  }
}

function join(outer, inner) {
  if (!outer) return inner;
  if (!inner) return outer;
  return inner.startsWith('[') ? outer + inner : `${outer}.${inner}`;
}

function within(path, fn) {
  try {
    return fn();
  } catch (e) {
    throw at(e, path);
  }
}

/** `e` with `path` (a field name or an index) prepended, if it is a ProtocolError. */
function at(e, path) {
  if (e instanceof ProtocolError) return typeof path === 'number' ? e.inIndex(path) : e.inField(path);
  return e;
}

/** What serde calls a value it did not expect. */
export function unexpected(value) {
  if (value === null) return 'null';
  if (value === undefined) return 'nothing';
  if (typeof value === 'boolean') return `boolean \`${value}\``;
  if (typeof value === 'number') {
    return Number.isInteger(value) ? `integer \`${value}\`` : `floating point \`${value}\``;
  }
  if (typeof value === 'string') return `string ${JSON.stringify(value)}`;
  if (Array.isArray(value)) return 'sequence';
  if (typeof value === 'object') return 'map';
  return typeof value;
}

function invalid(value, expected) {
  return new ProtocolError(`invalid type: ${unexpected(value)}, expected ${expected}`);
}

// ---- JSON text -------------------------------------------------------------

function finiteOnly(_key, value) {
  if (typeof value === 'number' && !Number.isFinite(value)) {
    throw new ProtocolError(`${value} is not a JSON number`);
  }
  if (typeof value === 'bigint') {
    throw new ProtocolError(`the bigint ${value} is not a JSON number`);
  }
  return value;
}

/**
 * A value of any JSON as the text that crosses (compact, like the engine).
 * Non-finite numbers have no JSON form and fail, rather than becoming
 * `null` as `JSON.stringify` would have it.
 * @param {unknown} value
 * @returns {string}
 */
export function jsonText(value) {
  const text = JSON.stringify(value, finiteOnly);
  if (text === undefined) throw new ProtocolError(`not JSON: ${typeof value}`);
  return text;
}

/**
 * The value of JSON text that crossed.
 * @param {string} text
 */
export function jsonValue(text) {
  try {
    return JSON.parse(text);
  } catch (e) {
    throw new ProtocolError(`invalid JSON text: ${e.message}`);
  }
}

// ---- the types ---------------------------------------------------------------

const camel = (name) => name.replace(/_([a-z])/g, (_, c) => c.toUpperCase());

const prim = (name, check) => ({ kind: 'prim', name, check });
const str = prim('a string', (v) => typeof v === 'string');
const u32 = prim('u32', (v) => Number.isInteger(v) && v >= 0 && v <= 0xffffffff);
const f64 = prim('f64', (v) => typeof v === 'number' && Number.isFinite(v));
const bool = prim('a boolean', (v) => typeof v === 'boolean');
const json = { kind: 'json' };
const opt = (t) => ({ kind: 'opt', t });
const list = (t) => ({ kind: 'list', t });
const enm = (...names) => ({ kind: 'enum', names });

/**
 * A record: `fields` maps each JSON name to its type, or to `[witName,
 * type]` where the WIT name is not the camelCase of the JSON one;
 * `keepNull` names the optional fields JSON writes as `null`; `special`
 * converts a field that needs the rest of the record.
 */
const rec = (name, fields, { keepNull = [], special = {} } = {}) => ({
  kind: 'rec',
  name,
  fields: Object.entries(fields).map(([k, t]) => (Array.isArray(t) ? [k, t[0], t[1]] : [k, camel(k), t])),
  keepNull: new Set(keepNull),
  special,
});

/**
 * A union tagged by `tagField`: each JSON tag maps to `[witTag, payload]`,
 * the payload a record type, `null` (no payload), or `{field, t}` (the WIT
 * payload is that one field's value).
 */
const union = (name, tagField, cases) => {
  const byWit = {};
  for (const [tag, [witTag, payload]] of Object.entries(cases)) byWit[witTag] = [tag, payload];
  return { kind: 'union', name, tagField, cases, byWit };
};

const custom = (name, to, from, conforms) => ({ kind: 'custom', name, to, from, conforms });

const Role = enm('system', 'user', 'assistant', 'tool');
const Handler = enm('server', 'worker', 'client');
const LlmHandler = enm('server', 'worker');
const ToolHandler = enm('worker', 'client');
const LlmFormat = enm('openai', 'anthropic');
const ReasoningEffort = enm('xhigh', 'high', 'medium', 'low', 'minimal', 'none');
const ErrorCode = enm('provider_error', 'rate_limited', 'refused', 'budget_exceeded', 'deadline_exceeded');
const CallKind = enm('tool_call', 'llm_call', 'sub_agent');
const CallStatus = enm('pending', 'completed', 'failed', 'retry_scheduled', 'queued');

// ---- messages ----

const UrlRef = rec('UrlRef', { url: str });
const FileData = rec('FileData', { filename: str, file_data: str });
const AudioData = rec('AudioData', { data: str, format: str });
const ContentPart = union('ContentPart', 'type', {
  text: ['text', { field: 'text', t: str }],
  image_url: ['image-url', { field: 'image_url', t: UrlRef }],
  file: ['file', { field: 'file', t: FileData }],
  input_audio: ['input-audio', { field: 'input_audio', t: AudioData }],
  video_url: ['video-url', { field: 'video_url', t: UrlRef }],
});
const Content = custom(
  'Content',
  (v) => {
    if (typeof v === 'string') return { tag: 'text', val: v };
    if (Array.isArray(v)) return { tag: 'parts', val: toWit(list(ContentPart), v) };
    throw invalid(v, 'a string or an array of content parts');
  },
  (w) => (w.tag === 'text' ? w.val : fromWit(list(ContentPart), w.val)),
  (v) => typeof v === 'string' || conforms(list(ContentPart), v),
);
const FunctionCall = rec('FunctionCall', { name: str, arguments: str });
const ToolCall = rec('ToolCall', { id: str, type: ['kind', str], function: FunctionCall });
const messageFields = {
  role: Role,
  content: opt(Content),
  tool_calls: opt(list(ToolCall)),
  tool_call_id: opt(str),
  name: opt(str),
};
const Message = rec('Message', { id: str, ...messageFields });
const DraftMessage = rec('DraftMessage', { id: opt(str), ...messageFields });

// ---- agent config ----

const RetryPolicy = rec(
  'RetryPolicy',
  { timeout_secs: opt(f64), max_retries: u32, backoff_base_secs: f64, backoff_max_secs: f64 },
  { keepNull: ['timeout_secs'] },
);
const AgentTool = rec('AgentTool', {
  name: str,
  description: opt(str),
  input: opt(json),
  output: opt(json),
  handler: opt(ToolHandler),
});
const SubAgent = rec('SubAgent', { id: str, description: opt(str) });
const McpServerUse = rec('McpServerUse', { server: str, tools: opt(list(str)) });
const AgentConfig = rec('AgentConfig', {
  model: str,
  system: opt(str),
  stream: opt(bool),
  handler: opt(LlmHandler),
  format: opt(LlmFormat),
  retry: opt(RetryPolicy),
  tools: opt(list(AgentTool)),
  sub_agents: opt(list(SubAgent)),
  mcp: opt(list(McpServerUse)),
});

// ---- LLM ----

const LlmTool = rec('LlmTool', { name: str, description: str, input: opt(json), output: opt(json) });
const ReasoningConfig = rec('ReasoningConfig', {
  effort: opt(ReasoningEffort),
  max_tokens: opt(u32),
  exclude: opt(bool),
  enabled: opt(bool),
});
const LlmRequest = rec('LlmRequest', {
  model: str,
  messages: list(DraftMessage),
  tools: opt(list(LlmTool)),
  temperature: opt(f64),
  max_completion_tokens: opt(u32),
  reasoning: opt(ReasoningConfig),
});
const LlmResponse = rec('LlmResponse', {
  model: str,
  content: opt(str),
  tool_calls: opt(list(ToolCall)),
  finish_reason: opt(str),
  usage: opt(json),
  cost: opt(str),
  images: opt(list(UrlRef)),
});
const ToolCallDelta = rec('ToolCallDelta', { id: str, name: opt(str), arguments: opt(str) });
const StreamDelta = rec('StreamDelta', {
  text: opt(str),
  reasoning: opt(str),
  tool_calls: opt(list(ToolCallDelta)),
  finish_reason: opt(str),
});

/** The typed form of an LLM request or response, when it holds `value` exactly. */
function bodyToWit(type, value, typedAllowed) {
  if (typedAllowed && conforms(type, value)) return { tag: 'standard', val: toWit(type, value) };
  return { tag: 'native', val: jsonText(value) };
}
function bodyFromWit(type, body) {
  return body.tag === 'standard' ? fromWit(type, body.val) : jsonValue(body.val);
}

// ---- triggers ----

const ToolInput = union('ToolInput', 'status', {
  valid: ['valid', { field: 'value', t: json }],
  invalid: ['invalid', rec('InvalidInput', { value: json, error: str })],
  malformed: ['malformed', { field: 'error', t: str }],
});
const ClientContext = rec('ClientContext', {
  tools: opt(list(AgentTool)),
  context: opt(list(json)),
  state: opt(json),
  forwarded_props: opt(json),
});
const Trigger = union('Trigger', 'type', {
  'session.start': ['session-start', null],
  'client.messages': [
    'client-messages',
    rec('ClientMessagesTrigger', { messages: list(DraftMessage), new_from: u32, client: ClientContext }),
  ],
  'client.action': ['client-action', rec('ClientActionTrigger', { name: str, args: opt(json) })],
  'tool.execute': [
    'tool-execute',
    rec('ToolExecute', {
      id: str,
      name: str,
      arguments: str,
      input: ToolInput,
      attempt: u32,
      deadline: opt(str),
    }),
  ],
  'tool.finished': [
    'tool-finished',
    rec('ToolFinished', { id: str, ok: bool, name: str, result: opt(str), error: opt(str) }),
  ],
  'llm.execute': [
    'llm-execute',
    rec(
      'LlmExecute',
      { id: str, request: json, format: opt(LlmFormat), stream: bool, attempt: u32, deadline: opt(str) },
      {
        special: {
          request: {
            to: (v) => bodyToWit(LlmRequest, v.request, v.format === undefined || v.format === null),
            from: (w) => bodyFromWit(LlmRequest, w.request),
          },
        },
      },
    ),
  ],
  'llm.finished': [
    'llm-finished',
    rec('LlmFinished', {
      id: str,
      ok: bool,
      message: opt(DraftMessage),
      truncated: bool,
      usage: opt(json),
      cost: opt(str),
      error: opt(str),
      code: opt(ErrorCode),
      detail: opt(json),
    }),
  ],
  'sub_agent.finished': [
    'sub-agent-finished',
    rec('SubAgentFinished', {
      id: str,
      ok: bool,
      session_id: str,
      agent_id: str,
      result: opt(str),
      error: opt(str),
    }),
  ],
  'interrupt.resumed': ['interrupt-resumed', rec('InterruptResumed', { interrupt_id: str, payload: opt(json) })],
});

// ---- actions ----

const CallError = rec('CallError', {
  id: opt(str),
  attempt: opt(u32),
  error: str,
  retryable: opt(bool),
  code: opt(ErrorCode),
  detail: opt(json),
});
const Action = union('Action', 'type', {
  'llm.call': [
    'llm-call',
    rec('LlmCall', {
      id: opt(str),
      model: opt(str),
      messages: opt(list(DraftMessage)),
      tools: opt(list(LlmTool)),
      temperature: opt(f64),
      max_completion_tokens: opt(u32),
      reasoning: opt(ReasoningConfig),
      stream: opt(bool),
      retry: opt(RetryPolicy),
      handler: opt(LlmHandler),
    }),
  ],
  'tool.call': [
    'tool-call',
    rec('ToolCallAction', {
      id: opt(str),
      name: str,
      arguments: json,
      handler: opt(ToolHandler),
      retry: opt(RetryPolicy),
    }),
  ],
  'tool.result': ['tool-result', rec('ToolResult', { id: opt(str), attempt: opt(u32), result: json })],
  'tool.error': ['tool-error', CallError],
  'llm.result': [
    'llm-result',
    rec(
      'LlmResult',
      { id: opt(str), attempt: opt(u32), response: json },
      {
        special: {
          response: {
            to: (v) => bodyToWit(LlmResponse, v.response, true),
            from: (w) => bodyFromWit(LlmResponse, w.response),
          },
        },
      },
    ),
  ],
  'llm.error': ['llm-error', CallError],
  'sub_agent.spawn': [
    'sub-agent-spawn',
    rec('SubAgentSpawn', { session_id: str, agent_id: str, tool_call_id: str, retry: opt(RetryPolicy) }),
  ],
  'message.send': ['message-send', rec('MessageSend', { session_id: str, message: DraftMessage })],
  interrupt: [
    'interrupt',
    rec('Interrupt', { interrupt_id: opt(str), reason: str, payload: opt(json), resume_schema: opt(json) }),
  ],
  done: ['done', rec('Done', { data: opt(json) })],
});

// ---- the decision exchange ----

const StringMap = custom(
  'a map of strings',
  (v) => {
    if (v === null || typeof v !== 'object' || Array.isArray(v)) throw invalid(v, 'a map');
    return Object.entries(v).map(([k, s]) => {
      if (typeof s !== 'string') throw invalid(s, 'a string').inField(k);
      return [k, s];
    });
  },
  (w) => Object.fromEntries(w),
  (v) => v !== null && typeof v === 'object' && !Array.isArray(v) && Object.values(v).every((s) => typeof s === 'string'),
);
const WorkerIdentity = rec('WorkerIdentity', { id: opt(str), metadata: opt(StringMap) });
const Call = rec('Call', {
  id: str,
  kind: CallKind,
  status: CallStatus,
  attempt: u32,
  deadline: opt(str),
  anchor: opt(str),
  name: opt(str),
  arguments: opt(str),
  handler: opt(Handler),
  stream: opt(bool),
  agent_id: opt(str),
  session_id: opt(str),
});
const DecisionResponse = rec('DecisionResponse', {
  messages: opt(list(DraftMessage)),
  actions: opt(list(Action)),
  state: opt(json),
  agent: opt(AgentConfig),
});

function deepEqual(a, b) {
  if (a === b) return true;
  if (typeof a !== 'object' || typeof b !== 'object' || a === null || b === null) return false;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  if (Array.isArray(a)) return a.length === b.length && a.every((x, i) => deepEqual(x, b[i]));
  const ka = Object.keys(a).filter((k) => a[k] !== undefined);
  const kb = Object.keys(b).filter((k) => b[k] !== undefined);
  return ka.length === kb.length && ka.every((k) => deepEqual(a[k], b[k]));
}

function treeToWit(request) {
  const tree = request.message_tree ?? { nodes: [] };
  const path = request.messages ?? [];
  const seen = new Map();
  let following = 0;
  const nodes = within('nodes', () =>
      (tree.nodes ?? []).map((node, k) =>
        within(k, () => {
          let parent;
          if (node.parent_id === undefined || node.parent_id === null) parent = { tag: 'root' };
          else if (seen.has(node.parent_id)) parent = { tag: 'node', val: seen.get(node.parent_id) };
          else parent = { tag: 'id', val: node.parent_id };
          if (!seen.has(node.message.id)) seen.set(node.message.id, k);
          let message;
          if (following < path.length && deepEqual(path[following], node.message)) {
            message = { tag: 'active', val: following };
            following += 1;
          } else {
            message = { tag: 'other', val: within('message', () => toWit(Message, node.message)) };
          }
          return { message, parent };
        }),
      ),
  );
  return { nodes, headId: tree.head_id ?? undefined };
}

function badIndex(node, field, what, index) {
  return new ProtocolError(`refers to ${what} ${index}, which does not exist`).inField(field).inIndex(node).inField('nodes');
}

function treeFromWit(w, messages) {
  return messageTreeFromWit(w.messageTree, messages);
}

/**
 * The protocol's message tree of a WIT `message-tree`, whose active nodes
 * refer to `messages` (the active path) by index.
 */
export function messageTreeFromWit(witTree, messages) {
  const nodes = [];
  witTree.nodes.forEach((node, k) => {
    let message;
    if (node.message.tag === 'active') {
      message = messages[node.message.val];
      if (message === undefined) throw badIndex(k, 'message', 'message', node.message.val);
    } else {
      try {
        message = fromWit(Message, node.message.val);
      } catch (e) {
        if (e instanceof ProtocolError) throw e.inField('message').inIndex(k).inField('nodes');
        throw e;
      }
    }
    const out = { message };
    if (node.parent.tag === 'id') out.parent_id = node.parent.val;
    else if (node.parent.tag === 'node') {
      if (!(node.parent.val >= 0 && node.parent.val < k)) throw badIndex(k, 'parent', 'an earlier node', node.parent.val);
      out.parent_id = nodes[node.parent.val].message.id;
    }
    nodes.push(out);
  });
  const tree = { nodes };
  if (witTree.headId !== undefined && witTree.headId !== null) tree.head_id = witTree.headId;
  return tree;
}

const DecisionRequest = rec(
  'DecisionRequest',
  {
    session_id: str,
    decision_id: str,
    agent_id: str,
    identity: WorkerIdentity,
    trigger: Trigger,
    proposed: DecisionResponse,
    state: json,
    agent: opt(AgentConfig),
    calls: list(Call),
    pending_calls: u32,
    messages: list(Message),
    message_tree: custom('MessageTree', null, null, null),
    ancestry: list(str),
    attempts: u32,
    deadline: opt(str),
    turn_id: opt(str),
  },
  {
    keepNull: ['agent', 'deadline', 'turn_id'],
    special: {
      message_tree: {
        to: (v) => treeToWit(v),
        from: (w, done) => treeFromWit(w, done.messages),
      },
    },
  },
);

// `subs:agent/branch`'s trigger (subs:agent@0.2.0): `client.messages` is a
// `client-messages-trigger` of the branch, whose `rest` reads as `messages`
// beside `shared`, as the `agent-json` world's JSON has it.
const BranchTrigger = union('Trigger', 'type', {
  ...Trigger.cases,
  'client.messages': [
    'client-messages',
    rec('ClientMessagesTrigger', {
      shared: u32,
      messages: ['rest', list(DraftMessage)],
      new_from: u32,
      client: ClientContext,
    }),
  ],
});

// `subs:agent/branch`'s `decision-request`: the same fields less the
// branch, which is read through the `messages` resource, and its trigger.
const BranchRequest = rec(
  'DecisionRequest',
  Object.fromEntries(
    DecisionRequest.fields
      .filter(([k]) => k !== 'messages' && k !== 'message_tree')
      .map(([k, , t]) => [k, k === 'trigger' ? BranchTrigger : t]),
  ),
  { keepNull: [...DecisionRequest.keepNull] },
);

// ---- client inputs ----

const ClientInput = union('ClientInput', 'type', {
  'client.message': [
    'client-message',
    rec('ClientMessageInput', { agent_id: str, turn_id: opt(str), message: DraftMessage, stream: opt(bool) }),
  ],
  'client.messages': [
    'client-messages',
    rec('ClientMessagesInput', {
      agent_id: str,
      turn_id: opt(str),
      messages: list(DraftMessage),
      stream: opt(bool),
      client: opt(ClientContext),
    }),
  ],
  'client.action': [
    'client-action',
    rec('ClientActionInput', { agent_id: str, turn_id: opt(str), name: str, args: opt(json) }),
  ],
  'interrupt.resume': ['interrupt-resume', rec('InterruptResumeInput', { interrupt_id: str, payload: opt(json) })],
  'tool.result': ['tool-result', rec('ToolResultInput', { id: str, attempt: opt(u32), result: opt(json) })],
  'tool.error': [
    'tool-error',
    rec('ToolErrorInput', { id: str, error: str, retryable: bool, attempt: opt(u32) }),
  ],
});

/** The protocol's types, by their name in `docs/protocol.md`. */
export const types = {
  Role, Handler, LlmHandler, ToolHandler, LlmFormat, ReasoningEffort, ErrorCode, CallKind, CallStatus,
  UrlRef, FileData, AudioData, ContentPart, Content, FunctionCall, ToolCall, Message, DraftMessage,
  RetryPolicy, AgentTool, SubAgent, AgentConfig,
  LlmTool, ReasoningConfig, LlmRequest, LlmResponse, ToolCallDelta, StreamDelta,
  ToolInput, ClientContext, Trigger, CallError, Action, WorkerIdentity, Call, DecisionResponse, DecisionRequest,
  ClientInput,
};

// ---- the conversions ---------------------------------------------------------

const isObject = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);
const absent = (v) => v === undefined || v === null;

/**
 * A protocol value (its JSON) as the WIT value of `type`.
 * @param {object} type one of {@link types}
 * @param {unknown} value
 * @returns {any}
 */
export function toWit(type, value) {
  switch (type.kind) {
    case 'prim':
      if (!type.check(value)) throw invalid(value, type.name);
      return value;
    case 'json':
      return jsonText(value);
    case 'opt':
      return absent(value) ? undefined : toWit(type.t, value);
    case 'list': {
      if (!Array.isArray(value)) throw invalid(value, 'a sequence');
      const out = new Array(value.length);
      for (let i = 0; i < value.length; i++) {
        try {
          out[i] = toWit(type.t, value[i]);
        } catch (e) {
          throw at(e, i);
        }
      }
      return out;
    }
    case 'enum':
      if (typeof value !== 'string') throw invalid(value, 'a string');
      if (!type.names.includes(value)) {
        throw new ProtocolError(`unknown variant \`${value}\`, expected one of ${type.names.map((n) => `\`${n}\``).join(', ')}`);
      }
      return value.replaceAll('_', '-');
    case 'custom':
      return type.to(value);
    case 'rec':
      return recToWit(type, value);
    case 'union': {
      if (!isObject(value)) throw invalid(value, `an object with a \`${type.tagField}\` field`);
      const tag = value[type.tagField];
      const c = type.cases[tag];
      if (c === undefined) {
        if (tag === undefined) throw new ProtocolError(`missing field \`${type.tagField}\``);
        const known = Object.keys(type.cases).map((t) => `\`${t}\``).join(', ');
        throw new ProtocolError(`${type.tagField}: unknown variant \`${tag}\`, expected one of ${known}`);
      }
      const [witTag, payload] = c;
      if (payload === null) return { tag: witTag };
      if (payload.kind === 'rec') return { tag: witTag, val: recToWit(payload, value) };
      const v = value[payload.field];
      if (v === undefined) throw new ProtocolError(`missing field \`${payload.field}\``);
      try {
        return { tag: witTag, val: toWit(payload.t, v) };
      } catch (e) {
        throw at(e, payload.field);
      }
    }
    default:
      throw new Error(`unknown type ${type.kind}`);
  }
}

function recToWit(type, value) {
  if (!isObject(value)) throw invalid(value, `struct ${type.name}`);
  const out = {};
  const fields = type.fields;
  for (let i = 0; i < fields.length; i++) {
    const field = fields[i];
    const name = field[0];
    const special = type.special[name];
    const v = value[name];
    if (!special && v === undefined && field[2].kind !== 'opt') throw new ProtocolError(`missing field \`${name}\``);
    try {
      out[field[1]] = special ? special.to(value) : toWit(field[2], v);
    } catch (e) {
      throw at(e, name);
    }
  }
  return out;
}

/**
 * The protocol value (its JSON) of a WIT value of `type`.
 * @param {object} type one of {@link types}
 * @param {any} value
 * @returns {any}
 */
export function fromWit(type, value) {
  switch (type.kind) {
    case 'prim':
      return value;
    case 'json':
      return jsonValue(value);
    case 'opt':
      return absent(value) ? undefined : fromWit(type.t, value);
    case 'list': {
      const out = new Array(value.length);
      for (let i = 0; i < value.length; i++) {
        try {
          out[i] = fromWit(type.t, value[i]);
        } catch (e) {
          throw at(e, i);
        }
      }
      return out;
    }
    case 'enum':
      return value.replaceAll('-', '_');
    case 'custom':
      return type.from(value);
    case 'rec':
      return recFromWit(type, value, {});
    case 'union': {
      const [tag, payload] = type.byWit[value.tag];
      const out = { [type.tagField]: tag };
      if (payload === null) return out;
      if (payload.kind === 'rec') return recFromWit(payload, value.val, out);
      try {
        out[payload.field] = fromWit(payload.t, value.val);
      } catch (e) {
        throw at(e, payload.field);
      }
      return out;
    }
    default:
      throw new Error(`unknown type ${type.kind}`);
  }
}

function recFromWit(type, value, out) {
  const fields = type.fields;
  for (let i = 0; i < fields.length; i++) {
    const field = fields[i];
    const name = field[0];
    const special = type.special[name];
    let v;
    try {
      v = special ? special.from(value, out) : fromWit(field[2], value[field[1]]);
    } catch (e) {
      throw at(e, name);
    }
    if (v !== undefined) out[name] = v;
    else if (type.keepNull.has(name)) out[name] = null;
  }
  return out;
}

/**
 * Whether `value` is exactly a protocol value of `type`: known fields only,
 * each of its type, optional ones omitted rather than `null` (unless the
 * protocol writes them `null`). What parsing and writing back would keep
 * unchanged.
 * @param {object} type
 * @param {unknown} value
 */
export function conforms(type, value) {
  switch (type.kind) {
    case 'prim':
      return type.check(value);
    case 'json':
      return value !== undefined;
    case 'opt':
      return value === undefined || (value !== null && conforms(type.t, value));
    case 'list':
      return Array.isArray(value) && value.every((v) => conforms(type.t, v));
    case 'enum':
      return type.names.includes(value);
    case 'custom':
      return type.conforms !== null && type.conforms(value);
    case 'rec':
      return recConforms(type, value, null);
    case 'union': {
      if (!isObject(value)) return false;
      const c = type.cases[value[type.tagField]];
      if (c === undefined) return false;
      const [, payload] = c;
      if (payload === null) return Object.keys(value).length === 1;
      if (payload.kind === 'rec') return recConforms(payload, value, type.tagField);
      return Object.keys(value).length === 2 && conforms(payload.t, value[payload.field]);
    }
    default:
      return false;
  }
}

function recConforms(type, value, tagField) {
  if (!isObject(value)) return false;
  const known = new Set(type.fields.map(([n]) => n));
  for (const k of Object.keys(value)) {
    if (k !== tagField && !known.has(k)) return false;
  }
  return type.fields.every(([name, , t]) => {
    const v = value[name];
    if (v === null && type.keepNull.has(name)) return true;
    if (v === undefined) return t.kind === 'opt';
    return conforms(t, v);
  });
}

/**
 * The WIT `decision-request` the engine sent, as protocol JSON.
 * @param {import('subs:agent/types@0.1.0').DecisionRequest} request
 * @returns {import('./index.js').DecisionRequest}
 */
export function requestFromWit(request) {
  return fromWit(DecisionRequest, request);
}

/**
 * The WIT `decision-request` of `subs:agent/branch@0.2.0` (without the
 * branch) as protocol JSON, without `messages` and `message_tree`; a
 * `client.messages` trigger as the `agent-json` world's JSON has it
 * (`shared`, and the rest of the view as `messages`).
 * @param {import('subs:agent/branch@0.2.0').DecisionRequest} request
 * @returns {Omit<import('./index.js').DecisionRequest, 'messages' | 'message_tree'>}
 */
export function branchRequestFromWit(request) {
  return fromWit(BranchRequest, request);
}

/**
 * A decision (protocol JSON) as the WIT `decision-response`.
 * @param {import('./index.js').DecisionResponse} decision
 * @returns {import('subs:agent/types@0.1.0').DecisionResponse}
 */
export function responseToWit(decision) {
  return toWit(DecisionResponse, decision);
}
