// The agent's decisions, without the engine: `npm test` in the project's
// directory (tsc, then `node --test` over the compiled tests).
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { RecordingHost, approval, requestFor, toolCall, toolError, toolExecute, toolResult } from '@subs/sdk';
import type { DecisionRequest, DecisionResponse } from '@subs/sdk';

import { App, DEFAULT_MODEL } from '../src/agent.js';
import type { State } from '../src/agent.js';

function decide(request: DecisionRequest<State>, host = new RecordingHost()): DecisionResponse<State> {
  return host.decide(new App(), request);
}

const refundArgs = { order_id: 'A1', amount: 5 };

test('the session starts with the tools and the summarizer', () => {
  const decision = decide(requestFor({ type: 'session.start' }));
  assert.equal(decision.agent?.model, DEFAULT_MODEL);
  assert.deepEqual(decision.agent?.tools?.map((t) => t.name), ['lookup_order', 'refund']);
  assert.deepEqual(decision.agent?.sub_agents?.map((a) => a.id), ['summarizer']);
});

test('a lookup answers', () => {
  const decision = decide(requestFor(toolExecute('lookup_order', '{"order_id": "A1"}')));
  assert.deepEqual(decision.actions, [toolResult({ order_id: 'A1', status: 'shipped' })]);
  assert.equal(decision.state, undefined);
});

test('a refund asks for approval', () => {
  // The model's reply calls `refund`: the engine proposes the call.
  const call = toolCall('refund', refundArgs, { id: 'c1' });
  const replied = requestFor<State>(
    { type: 'llm.finished', id: 'llm-1', ok: true, truncated: false },
    { proposed: { actions: [call] } },
  );
  assert.deepEqual(decide(replied).actions, [call, approval('c1', 'refund', refundArgs)]);
});

test('a denied refund never runs', () => {
  // A person answers the approval while the call waits.
  const answer = { type: 'interrupt.resumed', interrupt_id: 'c1', payload: { approved: false, reason: 'no' } } as const;
  const pending = { id: 'c1', kind: 'tool_call', status: 'pending', attempt: 1, name: 'refund' } as const;
  const host = new RecordingHost();
  const denied = decide(requestFor<State>(answer, { calls: [pending], pending_calls: 1 }), host);
  assert.deepEqual(denied.actions, [toolError('denied by the approver: no', { id: 'c1' })]);
  // Without a recorded approval, its execution is denied too.
  const run = decide(requestFor(toolExecute('refund', JSON.stringify(refundArgs), { id: 'c1' })), host);
  assert.equal(run.actions?.[0]?.type, 'tool.error');
  const refunded = host.logs.filter(([, line]) => line.startsWith('refunded'));
  assert.deepEqual(refunded, [], 'the refund never ran');
});

test('an approved refund runs and counts in the state', () => {
  const host = new RecordingHost();
  const approved = requestFor(toolExecute('refund', JSON.stringify(refundArgs), { id: 'c1' }), {
    state: { refunds: 1, subs_approvals: { c1: true } } as unknown as State,
  });
  const decision = decide(approved, host);
  assert.deepEqual(decision.actions, [toolResult({ refunded: 5, refunds: 2 })]);
  assert.deepEqual(decision.state, { refunds: 2 });
  assert.deepEqual(host.logs, [['info', 'refunded 5 on A1']]);
});
