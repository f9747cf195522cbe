// The agent, natively: the cases of the Rust example's tests
// (examples/tools/src/lib.rs), run with plain Node.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { DraftMessage, RecordingHost, llmCall, requestFor, toolError, toolExecute, toolResult, withAction, withMessage } from '@subs/sdk';

import { DEFAULT_MODEL, SYSTEM_PROMPT, Tools, decide as exported, rustDisplay } from '../agent.js';

// The config the Rust agent declares for the model `subs/offline`, as the
// engine records it: the JavaScript agent must declare the same, byte for byte.
const RUST_CONFIG =
  '{"model":"subs/offline","system":"You are a helpful assistant. For arithmetic, call the `add` tool instead ' +
  'of computing sums yourself. For the current date or time, call `get_time`, which returns Unix time in ' +
  'milliseconds.","tools":[{"name":"add","description":"Adds two numbers and returns their sum.","input":' +
  '{"type":"object","properties":{"a":{"type":"number","description":"The first addend"},"b":{"type":"number",' +
  '"description":"The second addend"}},"required":["a","b"],"additionalProperties":false},"output":{"type":' +
  '"object","properties":{"sum":{"type":"number"}},"required":["sum"],"additionalProperties":false}},{"name":' +
  '"get_time","description":"Returns the current time as Unix time in milliseconds.","input":{"type":"object",' +
  '"properties":{},"additionalProperties":false},"output":{"type":"object","properties":{"unix_ms":{"type":' +
  '"integer","minimum":0}},"required":["unix_ms"],"additionalProperties":false}}]}';

const decide = (request) => new RecordingHost().decide(new Tools(), request);

function executeCall(call) {
  const decision = decide(requestFor(call));
  assert.equal(decision.actions?.length, 1, JSON.stringify(decision));
  return decision.actions[0];
}

const execute = (name, args) => executeCall(toolExecute(name, args));

test('session.start declares the proposed model, prompt and tools', () => {
  const agent = decide(requestFor({ type: 'session.start' }, { proposed: { agent: { model: 'subs/offline' } } })).agent;
  assert.equal(agent.model, 'subs/offline');
  assert.equal(agent.system, SYSTEM_PROMPT);
  assert.deepEqual(agent.tools.map((t) => t.name), ['add', 'get_time']);
  for (const t of agent.tools) {
    assert.ok(t.description, t.name);
    assert.equal(t.input.type, 'object', t.name);
    assert.equal(t.output.type, 'object', t.name);
  }
  assert.deepEqual(agent.tools[0].input.required, ['a', 'b']);
  assert.deepEqual(agent.tools[1].input.properties, {});
});

test('the config is the Rust agent\'s, byte for byte', () => {
  const agent = decide(requestFor({ type: 'session.start' }, { proposed: { agent: { model: 'subs/offline' } } })).agent;
  assert.equal(JSON.stringify(agent), RUST_CONFIG);
});

test('session.start falls back to the config, then the default model', () => {
  assert.equal(
    decide(requestFor({ type: 'session.start' }, { agent: { model: 'anthropic/claude-sonnet-4-5' } })).agent.model,
    'anthropic/claude-sonnet-4-5',
  );
  const decision = decide(requestFor({ type: 'session.start' }));
  assert.equal(decision.agent.model, DEFAULT_MODEL);
  assert.equal(decision.actions, undefined);
  assert.equal(decision.messages, undefined);
});

test('add sums like JavaScript (it is)', () => {
  assert.deepEqual(execute('add', '{"a": 1, "b": 2}'), toolResult({ sum: 3 }));
  assert.deepEqual(execute('add', '{"a": 0.5, "b": -0.25}'), toolResult({ sum: 0.25 }));
  assert.equal(JSON.stringify(execute('add', '{"a": 1.5, "b": 1.5}')), '{"type":"tool.result","result":{"sum":3}}');
});

test('add refuses sums JSON cannot hold, in the Rust agent\'s words', () => {
  const action = execute('add', '{"a": 1e308, "b": 1e308}');
  assert.equal(action.type, 'tool.error');
  assert.equal(action.error, `1${'0'.repeat(308)} + 1${'0'.repeat(308)} is too large for a JSON number`);
  assert.deepEqual([0.5, 3, -0, 1e-7, 1.5e-7, 123.456, -2e21, 0.001].map(rustDisplay),
    ['0.5', '3', '-0', '0.0000001', '0.00000015', '123.456', '-2000000000000000000000', '0.001']);
});

test('invalid input is a tool error saying why', () => {
  const call = toolExecute('add', '{"a": 1}');
  call.input = { status: 'invalid', value: { a: 1 }, error: 'missing required property `b`' };
  assert.deepEqual(executeCall(call), toolError('invalid arguments for `add`: missing required property `b`'));
});

test('input that does not fit the arguments names the field', () => {
  const action = execute('add', '{"a": 1, "b": "two"}');
  assert.equal(action.type, 'tool.error');
  assert.match(action.error, /^invalid arguments for `add`: b: invalid type: string/);
});

test('malformed input is a tool error saying why', () => {
  const action = execute('add', '{"a": 1,');
  assert.equal(action.type, 'tool.error');
  assert.match(action.error, /^malformed arguments for `add`: /);
});

test('get_time tells the current Unix time', () => {
  const before = Date.now();
  const action = execute('get_time', '{}');
  const after = Date.now();
  assert.equal(action.type, 'tool.result');
  assert.ok(before <= action.result.unix_ms && action.result.unix_ms <= after);
  assert.ok(Number.isInteger(action.result.unix_ms));
  assert.deepEqual(Object.keys(action.result), ['unix_ms']);
});

test('unknown tools are refused by name', () => {
  assert.deepEqual(execute('mul', '{}'), toolError('unknown tool `mul`: this agent runs `add`, `get_time`'));
});

test('other triggers take the proposal', () => {
  const request = requestFor(
    { type: 'tool.finished', id: 'call-1', ok: true, name: 'add', result: '{"sum":3}' },
    { proposed: withAction(withMessage({}, DraftMessage.tool('call-1', '{"sum":3}')), llmCall()) },
  );
  assert.deepEqual(decide(request), request.proposed);
});

test('recorded requests replay as JSON', () => {
  const request = {
    session_id: 's', decision_id: 'd', agent_id: 'tools-js', identity: {},
    trigger: { type: 'tool.execute', id: 'call-9', name: 'add', arguments: '{"a":2,"b":40}', input: { status: 'valid', value: { a: 2, b: 40 } }, attempt: 1 },
    proposed: {}, state: null, agent: null, calls: [], pending_calls: 1, messages: [],
    message_tree: { nodes: [] }, ancestry: [], attempts: 1, deadline: null, turn_id: null,
  };
  assert.deepEqual(new RecordingHost().decideJson(new Tools(), JSON.stringify(request)), {
    actions: [{ type: 'tool.result', result: { sum: 42 } }],
  });
});

test('the module exports decide', () => {
  assert.equal(typeof exported, 'function');
});
