import assert from 'node:assert/strict';
import { test } from 'node:test';

import {
  Agent, Context, DecideError, DraftMessage, RecordingHost, decideJson, decideWit, done, exportAgent, doneWith, interrupt, llmCall, llmError,
  messageText, requestFor, toolCall, toolExecute, withAction, withMessage,
} from '../src/index.js';
import { fromWit, toWit, types } from '../src/wit.js';

class Passthrough extends Agent {}

class Greeter extends Agent {
  decide(request, cx) {
    cx.info(`trigger ${request.trigger.type}`);
    return withAction(withMessage({}, DraftMessage.assistant('hi')), done());
  }
}

test('an empty agent takes the proposal', () => {
  const request = requestFor({ type: 'session.start' }, { proposed: { agent: { model: 'openai/gpt-4o-mini' } } });
  assert.deepEqual(new RecordingHost().decide(new Passthrough(), request), request.proposed);
});

test('logs are recorded in order', () => {
  const host = new RecordingHost();
  const decision = host.decide(new Greeter(), requestFor({ type: 'session.start' }));
  assert.deepEqual(decision, { messages: [{ role: 'assistant', content: 'hi' }], actions: [{ type: 'done' }] });
  const cx = new Context(host);
  cx.debug('a');
  cx.warn('b');
  cx.error('c');
  cx.trace('d');
  cx.log('info', 'e');
  assert.deepEqual(host.logs.map(([level]) => level), ['info', 'debug', 'warn', 'error', 'trace', 'info']);
  assert.deepEqual(host.logs[0], ['info', 'trigger session.start']);
  assert.throws(() => cx.log('loud', 'x'), TypeError);
});

test('deltas stream unless refused', () => {
  const host = new RecordingHost();
  const cx = new Context(host);
  cx.emitText('hel');
  cx.emitDelta({ reasoning: 'hmm' });
  cx.emitText('lo');
  assert.equal(host.text(), 'hello');
  assert.equal(host.deltas.length, 3);
  const refusing = RecordingHost.refusingDeltas();
  assert.throws(() => new Context(refusing).emitText('x'), (e) => e instanceof DecideError && !e.retryable && /llm\.execute/.test(e.message));
  assert.deepEqual(refusing.deltas, []);
});

test('decideJson takes and gives protocol JSON', () => {
  const request = requestFor({ type: 'session.start' }, { proposed: { agent: { model: 'subs/offline' } } });
  const host = new RecordingHost();
  assert.deepEqual(host.decideJson(new Passthrough(), request), { agent: { model: 'subs/offline' } });
  assert.deepEqual(host.decideJson(new Greeter(), JSON.stringify(request)), {
    messages: [{ role: 'assistant', content: 'hi' }],
    actions: [{ type: 'done' }],
  });
});

test('builders have the Rust constructors names', () => {
  assert.deepEqual(llmCall(), { type: 'llm.call' });
  assert.deepEqual(toolCall('add', { a: 1 }), { type: 'tool.call', name: 'add', arguments: { a: 1 } });
  assert.equal(JSON.stringify(llmError('no', { retryable: true })), '{"type":"llm.error","error":"no","retryable":true}');
  assert.deepEqual(interrupt('approve?', { x: 1 }), { type: 'interrupt', reason: 'approve?', payload: { x: 1 } });
  assert.deepEqual(done(), { type: 'done' });
  assert.deepEqual(doneWith(null), { type: 'done', data: null });
  assert.deepEqual(DraftMessage.tool('c1', '3'), { role: 'tool', content: '3', tool_call_id: 'c1' });
  assert.equal(messageText({ content: [{ type: 'text', text: 'a' }, { type: 'image_url', image_url: { url: 'u' } }, { type: 'text', text: 'b' }] }), 'a\nb');
  assert.equal(toolExecute('t', '{"a": 1}').input.status, 'valid');
  assert.deepEqual(toolExecute('t', '3').input, { status: 'malformed', error: 'the arguments are not a JSON object' });
});

class Echo extends Agent {
  decide(request, cx) {
    cx.info(request.trigger.type);
    cx.emitText('streamed');
    if (request.state === 'fail') throw DecideError.retryable('asked to fail');
    if (request.state === 'bug') return request.missing.field;
    if (request.state === 'garbage') return { actions: [{ type: 'tool.result', result: Number.POSITIVE_INFINITY }] };
    return withAction(withMessage(request.proposed, DraftMessage.assistant('hello')), doneWith({ state: request.state }));
  }
}

const echoRequest = (state) => requestFor({ type: 'session.start' }, { state, proposed: { agent: { model: 'm/x' } } });

// The two worlds' `decide`: each takes the request and gives the decision
// as protocol JSON here.
const worlds = [
  ['agent', (agent, request, host) => fromWit(types.DecisionResponse, decideWit(agent, toWit(types.DecisionRequest, request), host))],
  ['agent-json', (agent, request, host) => JSON.parse(decideJson(agent, JSON.stringify(request), host))],
];

for (const [world, decide] of worlds) {
  test(`a decision crosses the boundary both ways (${world})`, () => {
    const host = new RecordingHost();
    const decision = decide(new Echo(), echoRequest({ n: 1.5 }), host);
    assert.deepEqual(decision, {
      messages: [{ role: 'assistant', content: 'hello' }],
      actions: [{ type: 'done', data: { state: { n: 1.5 } } }],
      agent: { model: 'm/x' },
    });
    assert.deepEqual(host.logs, [['info', 'session.start']]);
    assert.equal(host.text(), 'streamed');
  });

  test(`errors become decide errors (${world})`, (t) => {
    t.mock.method(console, 'error', () => {});
    const cases = [
      ['fail', new RecordingHost(), { message: 'asked to fail', retryable: true }],
      ['bug', new RecordingHost(), { message: "TypeError: Cannot read properties of undefined (reading 'field')", retryable: false }],
      [null, RecordingHost.refusingDeltas(), { message: 'deltas are only accepted while answering an llm.execute trigger with stream: true', retryable: false }],
      ['garbage', new RecordingHost(), { message: 'the decision is not valid protocol: actions[0].result: Infinity is not a JSON number', retryable: false }],
    ];
    for (const [state, host, error] of cases) {
      assert.throws(() => decide(new Echo(), echoRequest(state), host), (e) => {
        assert.deepEqual(e, error);
        return true;
      });
    }
  });
}

test('exportAgent answers in the form the request came in', () => {
  const decide = exportAgent(new Passthrough());
  assert.deepEqual(JSON.parse(decide(JSON.stringify(echoRequest(1)))), { agent: { model: 'm/x' } });
  assert.equal(decide(toWit(types.DecisionRequest, echoRequest(1))).agent.model, 'm/x');
});

test('an unreadable JSON request fails terminally', () => {
  assert.throws(() => decideJson(new Echo(), '{not json', new RecordingHost()), (e) => {
    assert.equal(e.retryable, false);
    assert.match(e.message, /^the engine sent a request the agent cannot read: /);
    return true;
  });
});

const witRequest = (state) => toWit(types.DecisionRequest, echoRequest(state));

test('unreadable requests fail terminally naming the field', () => {
  const request = witRequest(null);
  request.state = '{not json';
  assert.throws(() => decideWit(new Echo(), request, new RecordingHost()), (e) => {
    assert.equal(e.retryable, false);
    assert.match(e.message, /^the engine sent a request the agent cannot read: state: invalid JSON text/);
    return true;
  });
});
