// The protocol <-> WIT mapping: every protocol fixture crosses unchanged,
// and the places where WIT and JSON differ map as the engine expects.
import assert from 'node:assert/strict';
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

import { ProtocolError, conforms, fromWit, toWit, types } from '../src/wit.js';

const fixtures = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..', 'tests', 'fixtures', 'protocol');

// The type of each fixture directory (as in engine/protocol/tests/fixtures.rs);
// a tree crosses only inside a request, folded against its messages.
const TYPES = {
  decision_request: types.DecisionRequest,
  worker_identity: types.WorkerIdentity,
  call: types.Call,
  decision_response: types.DecisionResponse,
  trigger: types.Trigger,
  tool_input: types.ToolInput,
  error_code: types.ErrorCode,
  client_context: types.ClientContext,
  action: types.Action,
  agent_config: types.AgentConfig,
  agent_tool: types.AgentTool,
  sub_agent: types.SubAgent,
  retry_policy: types.RetryPolicy,
  content: types.Content,
  content_part: types.ContentPart,
  tool_call: types.ToolCall,
  message: types.Message,
  draft_message: types.DraftMessage,
  message_tree: null,
  llm_request: types.LlmRequest,
  llm_tool: types.LlmTool,
  reasoning_config: types.ReasoningConfig,
  llm_response: types.LlmResponse,
  client_input: types.ClientInput,
  stream_delta: types.StreamDelta,
  role: types.Role,
  handler: types.Handler,
  // A stream frame's payload: the SDK's types hold it, WIT does not.
  tool_progress: null,
};

function canonical(value) {
  if (Array.isArray(value)) return value.map(canonical);
  if (value !== null && typeof value === 'object') {
    return Object.fromEntries(Object.keys(value).sort().map((k) => [k, canonical(value[k])]));
  }
  return value;
}

test('every fixture crosses unchanged', { skip: !existsSync(fixtures) && 'no fixtures here' }, () => {
  let crossed = 0;
  for (const dir of readdirSync(fixtures).sort()) {
    assert.ok(dir in TYPES, `no type for the fixture directory ${dir}`);
    const type = TYPES[dir];
    if (type === null) continue;
    for (const file of readdirSync(join(fixtures, dir)).sort()) {
      const value = JSON.parse(readFileSync(join(fixtures, dir, file), 'utf8'));
      const back = fromWit(type, toWit(type, value));
      assert.deepEqual(canonical(back), canonical(value), `${dir}/${file}`);
      crossed += 1;
    }
  }
  assert.ok(crossed > 90, `${crossed} fixtures`);
});

test('records, enums and variants take the jco shapes', () => {
  const request = {
    session_id: 's', decision_id: 'd', agent_id: 'a', identity: { metadata: { plan: 'free' } },
    trigger: { type: 'tool.execute', id: 'c', name: 'add', arguments: '{}', input: { status: 'valid', value: {} }, attempt: 1 },
    proposed: {}, state: null, agent: null,
    calls: [{ id: 'c', kind: 'tool_call', status: 'retry_scheduled', attempt: 2 }], pending_calls: 1,
    messages: [{ id: 'm1', role: 'user', content: 'hi', tool_calls: [{ id: 't', type: 'function', function: { name: 'add', arguments: '{}' } }] }],
    message_tree: { nodes: [] }, ancestry: [], attempts: 1, deadline: null, turn_id: null,
  };
  const w = toWit(types.DecisionRequest, request);
  assert.deepEqual(w.trigger, {
    tag: 'tool-execute',
    val: { id: 'c', name: 'add', arguments: '{}', input: { tag: 'valid', val: '{}' }, attempt: 1, deadline: undefined },
  });
  assert.deepEqual(w.identity.metadata, [['plan', 'free']]);
  assert.equal(w.calls[0].status, 'retry-scheduled');
  assert.equal(w.calls[0].kind, 'tool-call');
  assert.equal(w.pendingCalls, 1);
  assert.deepEqual(w.messages[0].content, { tag: 'text', val: 'hi' });
  assert.equal(w.messages[0].toolCalls[0].kind, 'function');
  assert.equal(w.state, 'null');
  assert.equal(w.agent, undefined);
  assert.deepEqual(fromWit(types.DecisionRequest, w), request);
});

test('actions map to their cases', () => {
  const decision = {
    actions: [
      { type: 'tool.error', error: 'no' },
      { type: 'llm.error', error: 'no', retryable: true },
      { type: 'tool.call', name: 't', arguments: [1] },
      { type: 'done' },
    ],
    state: { n: 1 },
  };
  const w = toWit(types.DecisionResponse, decision);
  assert.deepEqual(w.actions.map((a) => a.tag), ['tool-error', 'llm-error', 'tool-call', 'done']);
  assert.equal(w.actions[2].val.arguments, '[1]');
  assert.equal(w.state, '{"n":1}');
  assert.deepEqual(fromWit(types.DecisionResponse, w), decision);
});

function treeRequest() {
  const m1 = { id: 'm1', role: 'user', content: 'hi' };
  const m2 = { id: 'm2', role: 'assistant', content: 'hello' };
  const old = { id: 'm0', role: 'assistant', content: 'an older branch' };
  return {
    session_id: 's', decision_id: 'd', agent_id: 'a', identity: {}, trigger: { type: 'session.start' }, proposed: {},
    state: null, agent: null, calls: [], pending_calls: 0, messages: [m1, m2],
    message_tree: {
      nodes: [
        { message: m1 },
        { message: old, parent_id: 'm1' },
        { message: m2, parent_id: 'm1' },
        { message: { id: 'x', role: 'user' }, parent_id: 'gone' },
      ],
      head_id: 'm2',
    },
    ancestry: [], attempts: 1, deadline: null, turn_id: null,
  };
}

test('the active path is not repeated in the tree', () => {
  const request = treeRequest();
  const w = toWit(types.DecisionRequest, request);
  assert.deepEqual(w.messageTree.nodes.map((n) => n.message.tag), ['active', 'other', 'active', 'other']);
  assert.deepEqual(w.messageTree.nodes.map((n) => n.parent), [
    { tag: 'root' }, { tag: 'node', val: 0 }, { tag: 'node', val: 0 }, { tag: 'id', val: 'gone' },
  ]);
  assert.equal(w.messageTree.headId, 'm2');
  assert.deepEqual(fromWit(types.DecisionRequest, w), request);
});

test('tree indexes that point nowhere name the node', () => {
  let w = toWit(types.DecisionRequest, treeRequest());
  w.messageTree.nodes[2].message = { tag: 'active', val: 7 };
  assert.throws(() => fromWit(types.DecisionRequest, w), {
    message: 'message_tree.nodes[2].message: refers to message 7, which does not exist',
  });
  w = toWit(types.DecisionRequest, treeRequest());
  w.messageTree.nodes[1].parent = { tag: 'node', val: 1 };
  assert.throws(() => fromWit(types.DecisionRequest, w), {
    message: 'message_tree.nodes[1].parent: refers to an earlier node 1, which does not exist',
  });
});

test('llm bodies cross typed only when the typed form holds them exactly', () => {
  const execute = (request, format) => ({ type: 'llm.execute', id: 'l', request, ...(format ? { format } : {}), stream: false, attempt: 1 });
  const standard = execute({ model: 'm', messages: [{ role: 'user', content: 'hi' }], temperature: 0.5 });
  assert.equal(toWit(types.Trigger, standard).val.request.tag, 'standard');
  assert.deepEqual(fromWit(types.Trigger, toWit(types.Trigger, standard)), standard);
  for (const [request, format] of [
    [{ model: 'm', messages: [], max_tokens: 5 }, undefined],
    [{ model: 'm', messages: [], tools: null }, undefined],
    [{ model: 'm', messages: [] }, 'anthropic'],
  ]) {
    const trigger = execute(request, format);
    assert.equal(toWit(types.Trigger, trigger).val.request.tag, 'native', JSON.stringify(request));
    assert.deepEqual(fromWit(types.Trigger, toWit(types.Trigger, trigger)), trigger);
  }
  assert.equal(toWit(types.Action, { type: 'llm.result', response: { model: 'm', content: 'hi' } }).val.response.tag, 'standard');
  assert.equal(toWit(types.Action, { type: 'llm.result', response: { id: 'x', content: [] } }).val.response.tag, 'native');
  assert.ok(conforms(types.LlmResponse, { model: 'm', usage: { a: 1 } }));
  assert.ok(!conforms(types.LlmResponse, { model: 'm', content: null }));
});

test('errors name the field', () => {
  const cases = [
    [types.DecisionResponse, { actions: [{ type: 'tool.call', name: 5, arguments: {} }] }, 'actions[0].name: invalid type: integer `5`, expected a string'],
    [types.DecisionResponse, { actions: [{ type: 'tool.call', name: 'x' }] }, 'actions[0]: missing field `arguments`'],
    [types.DecisionResponse, { actions: [{ type: 'tool.result' }] }, 'actions[0]: missing field `result`'],
    [types.Action, { type: 'tool.dance' }, 'type: unknown variant `tool.dance`'],
    [types.Action, { kind: 'done' }, 'missing field `type`'],
    [types.DecisionResponse, { messages: [{ role: 'robot' }] }, 'messages[0].role: unknown variant `robot`'],
    [types.DecisionResponse, { agent: { model: 'm', retry: { max_retries: -1, backoff_base_secs: 1, backoff_max_secs: 1 } } }, 'agent.retry.max_retries: invalid type: integer `-1`, expected u32'],
    [types.DecisionResponse, { state: Number.NaN }, 'state: NaN is not a JSON number'],
  ];
  for (const [type, value, message] of cases) {
    assert.throws(() => toWit(type, value), (e) => e instanceof ProtocolError && e.message.startsWith(message), message);
  }
  const w = toWit(types.DecisionResponse, { actions: [{ type: 'done', data: { a: 1 } }] });
  w.actions[0].val.data = '{nope';
  assert.throws(() => fromWit(types.DecisionResponse, w), /^ProtocolError: actions\[0\]\.data: invalid JSON text/);
});
