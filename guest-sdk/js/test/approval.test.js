// Approvals, tool contexts, sub-agents and the builders, as the Rust SDK
// has them.

import assert from 'node:assert/strict';
import test from 'node:test';

import {
  RecordingHost,
  ToolRouter,
  approval,
  approvalAnswerSchema,
  approvalResumed,
  delegate,
  interruptWith,
  replaceActions,
  requestFor,
  s,
  spawn,
  toolCall,
  toolError,
  toolExecute,
  toolResult,
} from '../src/index.js';

function refunds() {
  const ran = [];
  const router = new ToolRouter()
    .tool({ name: 'lookup_order', input: s.object({ order_id: s.string() }) }, ({ order_id }) => ({ order_id, total: 5 }))
    .tool(
      { name: 'refund', input: s.object({ order_id: s.string(), amount: s.number() }), needsApproval: true },
      ({ order_id }, ctx) => {
        ran.push(order_id);
        ctx.state = { ...(ctx.state ?? {}), refunds: (ctx.state?.refunds ?? 0) + 1 };
        return 'refunded';
      },
    );
  return { router, ran };
}

/** The router as an agent deciding every request. */
const agentOf = (router) => ({ decide: (request, cx) => router.handle(request, cx) });

function proposing(...actions) {
  return requestFor({ type: 'llm.finished', id: 'l1', ok: true, truncated: false }, { proposed: { actions } });
}

test('a gated call keeps its tool.call and gets one approval each', () => {
  const { router } = refunds();
  const args = { order_id: 'A1', amount: 5 };
  const request = proposing(
    toolCall('refund', args, { id: 'c1' }),
    toolCall('lookup_order', { order_id: 'A1' }, { id: 'c2' }),
    toolCall('refund', { order_id: 'B2', amount: 1 }, { id: 'c3' }),
  );
  const decision = new RecordingHost().decide(agentOf(router), request);
  assert.deepEqual(
    decision.actions.map((a) => [a.type, a.id ?? a.interrupt_id]),
    [
      ['tool.call', 'c1'],
      ['interrupt', 'c1'],
      ['tool.call', 'c2'],
      ['tool.call', 'c3'],
      ['interrupt', 'c3'],
    ],
  );
  assert.deepEqual(decision.actions[1], {
    type: 'interrupt',
    interrupt_id: 'c1',
    reason: 'approve refund',
    payload: { tool: 'refund', call_id: 'c1', arguments: args },
    resume_schema: approvalAnswerSchema(),
  });
});

test('a call without an id gets one, and a predicate decides per call', () => {
  const router = new ToolRouter().tool(
    { name: 'refund', input: s.object({ amount: s.number() }), needsApproval: ({ amount }) => amount > 10 },
    () => 'ok',
  );
  const decision = router.handle(proposing(toolCall('refund', { amount: 50 }), toolCall('refund', { amount: 5 })));
  assert.equal(decision.actions.length, 3);
  assert.equal(decision.actions[0].id, 'approve.decision.0');
  assert.equal(decision.actions[1].interrupt_id, 'approve.decision.0');
  assert.equal(decision.actions[2].type, 'tool.call');
  assert.equal(router.needsApprovalFor('refund', { amount: 11 }), true);
  assert.equal(router.needsApprovalFor('refund', { amount: 10 }), false);
});

test('an approved call runs with its state; the answer is used once', () => {
  const { router, ran } = refunds();
  const host = new RecordingHost();
  const resumed = host.decide(agentOf(router), approvalResumed('c1', 'refund', { approved: true }));
  assert.deepEqual(resumed, { state: { subs_approvals: { c1: true } } });
  assert.deepEqual(host.logs, [['info', 'the call `c1` of `refund` was approved']]);
  const execute = requestFor(toolExecute('refund', '{"order_id":"A1","amount":5}', { id: 'c1' }), {
    state: { refunds: 1, subs_approvals: { c1: true, c9: 'later' } },
  });
  const decision = host.decide(agentOf(router), execute);
  assert.deepEqual(ran, ['A1']);
  assert.deepEqual(decision.actions, [toolResult('refunded')]);
  assert.deepEqual(decision.state, { refunds: 2, subs_approvals: { c9: 'later' } });
});

test('a denied call is settled with the reason and never runs', () => {
  const { router, ran } = refunds();
  const decision = router.handle(approvalResumed('c1', 'refund', { approved: false, reason: 'too much' }));
  assert.deepEqual(decision.actions, [toolError('denied by the approver: too much', { id: 'c1' })]);
  assert.equal(decision.state, undefined);
  // A call still queued behind another approval keeps its denial for its tool.execute.
  const queued = approvalResumed('c1', 'refund', { approved: false, reason: 'too much' });
  queued.calls[0].status = 'queued';
  const kept = router.handle(queued);
  assert.equal(kept.actions, undefined);
  assert.deepEqual(kept.state, { subs_approvals: { c1: 'too much' } });
  const execute = requestFor(toolExecute('refund', '{"order_id":"A1","amount":5}', { id: 'c1' }), { state: kept.state });
  const settled = router.handle(execute);
  assert.deepEqual(settled.actions, [toolError('denied by the approver: too much')]);
  assert.deepEqual(settled.state, {});
  assert.deepEqual(ran, []);
});

test('without a recorded approval a gated call fails closed', () => {
  const { router, ran } = refunds();
  for (const state of [null, { refunds: 1 }, { subs_approvals: { c2: true } }, [1]]) {
    const execute = requestFor(toolExecute('refund', '{"order_id":"A1","amount":5}', { id: 'c1' }), { state });
    assert.deepEqual(router.handle(execute).actions, [
      toolError('denied by the approver: no approval of this call was recorded'),
    ]);
  }
  for (const payload of [{ approved: 'yes' }, null, [true], { approve: true }]) {
    const decision = router.handle(approvalResumed('c1', 'refund', payload));
    assert.equal(decision.actions[0].error, 'denied by the approver: the answer was not {"approved": true|false}');
  }
  assert.deepEqual(ran, []);
});

test('resumes the router did not ask for take the proposal', () => {
  const { router } = refunds();
  const other = approvalResumed('c1', 'lookup_order', { approved: false });
  assert.deepEqual(router.handle(other), {});
  const done = approvalResumed('c1', 'refund', { approved: false });
  done.calls[0].status = 'completed';
  assert.deepEqual(router.handle(done), {});
});

test('tools see the call, the identity and the logs, and write state', () => {
  const router = new ToolRouter().tool({ name: 'who' }, (_args, ctx) => {
    ctx.info(`call ${ctx.callId}`);
    ctx.state = { seen: (ctx.state?.seen ?? 0) + 1 };
    return { id: ctx.id, owner: ctx.identity.id ?? null, attempt: ctx.attempt };
  });
  const host = new RecordingHost();
  const request = requestFor(toolExecute('who', '{}', { id: 'c7' }), { identity: { id: 'ada' }, state: { seen: 2 } });
  const decision = host.decide(agentOf(router), request);
  assert.deepEqual(decision.actions, [toolResult({ id: 'c7', owner: 'ada', attempt: 1 })]);
  assert.deepEqual(decision.state, { seen: 3 });
  assert.deepEqual(host.logs, [['info', 'call c7']]);
  // A tool that throws keeps what it wrote.
  const failing = new ToolRouter().tool({ name: 'f' }, (_a, ctx) => {
    ctx.state = { tried: true };
    throw new Error('nope');
  });
  const failed = failing.handle(requestFor(toolExecute('f', '{}')));
  assert.deepEqual(failed, { actions: [toolError('nope')], state: { tried: true } });
  // Unchanged state is not written.
  assert.equal(router.handle(requestFor(toolExecute('who', '{}'), { state: null })).state.seen, 1);
});

test('sub-agents are declared with the tools', () => {
  const router = new ToolRouter().tool({ name: 't' }, () => 1).subAgent('summarizer', 'Summarizes a text');
  assert.deepEqual(router.subAgents(), [{ id: 'summarizer', description: 'Summarizes a text' }]);
  assert.deepEqual(router.configure({ model: 'm' }), {
    model: 'm',
    tools: [{ name: 't' }],
    sub_agents: [{ id: 'summarizer', description: 'Summarizes a text' }],
  });
});

test('delegate records the call and the spawn together', () => {
  const request = requestFor({ type: 'session.start' });
  const decision = delegate({}, request, 'summarizer', 'Summarize: the order shipped.');
  const call = decision.messages[0].tool_calls[0];
  assert.deepEqual(decision.messages[0].role, 'assistant');
  assert.deepEqual(call.function, { name: 'summarizer', arguments: 'Summarize: the order shipped.' });
  assert.equal(call.id, 'delegate.decision.1');
  assert.deepEqual(decision.actions, [spawn('session.delegate.decision.1', 'summarizer', 'delegate.decision.1')]);
  delegate(decision, request, 'other', 'x');
  assert.equal(decision.actions[1].tool_call_id, 'delegate.decision.2');
  const long = requestFor({ type: 'session.start' }, { session_id: 's'.repeat(250) });
  const spawned = delegate({}, long, 'a', 'x').actions[0];
  assert.match(spawned.session_id, /^delegate\.[0-9a-f]{16}$/);
});

test('builders', () => {
  assert.deepEqual(interruptWith('pick', 'choose', { options: ['red'] }), {
    type: 'interrupt',
    interrupt_id: 'pick',
    reason: 'choose',
    payload: { options: ['red'] },
  });
  assert.equal(approval('c1', 'refund', {}).resume_schema.required[0], 'approved');
  const proposed = { messages: [{ role: 'user', content: 'hi' }], actions: [{ type: 'llm.call' }] };
  assert.deepEqual(replaceActions(proposed, [{ type: 'done' }]), { messages: proposed.messages, actions: [{ type: 'done' }] });
  assert.deepEqual(replaceActions(proposed, []), { messages: proposed.messages });
  assert.throws(() => new ToolRouter().tool({ name: 'x', needsApproval: 'yes' }, () => 1), /needsApproval/);
});
