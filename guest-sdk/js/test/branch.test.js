// `request.messages` read on demand: the lazy Messages over fakes of the
// engine's `messages` resource (subs:agent@0.2.0), in both worlds, each
// recording every call the SDK makes to it.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { Agent, BranchError, RecordingHost, decideJson, decideWit, heldMessages, messagesOf, requestFor } from '../src/index.js';
import { fromWit, toWit, types } from '../src/wit.js';

const message = (i) => ({ id: `m${i}`, role: i % 2 ? 'assistant' : 'user', content: `text ${i}` });
const path = (n) => Array.from({ length: n }, (_, i) => message(i));
const EDITED = { id: 'edited', role: 'user', content: 'forked' };

/** The resource as componentize-js binds it, JSON and typed methods both; calls recorded. */
class FakeResource {
  constructor(messages) {
    this.path = messages;
    this.calls = [];
    this.live = true;
  }
  call(what) {
    this.calls.push(what);
    // componentize-js throws a result's error with it as `payload`.
    if (!this.live) throw Object.assign(new Error('err'), { payload: 'this messages resource belongs to a decision that is over' });
  }
  index(id) {
    const i = this.path.findIndex((m) => m.id === id);
    return i < 0 ? undefined : i;
  }
  wit(messages) {
    return messages.map((m) => toWit(types.Message, m));
  }
  len() { this.call('len'); return this.path.length; }
  get(i) { this.call(`get ${i}`); return i < this.path.length ? toWit(types.Message, this.path[i]) : undefined; }
  range(a, b) { this.call(`range ${a}..${b}`); return this.wit(this.path.slice(a, b)); }
  last(n) { this.call(`last ${n}`); return this.wit(n ? this.path.slice(-n) : []); }
  after(id) { this.call(`after ${id}`); const i = this.index(id); return i === undefined ? undefined : this.wit(this.path.slice(i + 1)); }
  position(id) { this.call(`position ${id}`); return this.index(id); }
  tree() {
    this.call('tree');
    const nodes = this.path.map((_, i) => ({ message: { tag: 'active', val: i }, parent: i ? { tag: 'node', val: i - 1 } : { tag: 'root' } }));
    nodes.push({ message: { tag: 'other', val: toWit(types.Message, EDITED) }, parent: { tag: 'node', val: 0 } });
    return { nodes, headId: this.path.at(-1)?.id };
  }
  rangeJson(a, b) { this.call(`rangeJson ${a}..${b}`); return JSON.stringify(this.path.slice(a, b)); }
  afterJson(id) { this.call(`afterJson ${id}`); const i = this.index(id); return i === undefined ? undefined : JSON.stringify(this.path.slice(i + 1)); }
  treeJson() {
    this.call('treeJson');
    const nodes = this.path.map((m, i) => (i ? { message: m, parent_id: `m${i - 1}` } : { message: m }));
    nodes.push({ message: EDITED, parent_id: 'm0' });
    return JSON.stringify({ nodes, head_id: this.path.at(-1)?.id });
  }
}

const request = (state) => requestFor({ type: 'session.start' }, { state });

// Each world's decide with a resource: the request without its branch in,
// the decision (as protocol JSON) out.
const WORLDS = [
  ['agent-json', (agent, state, resource) => {
    const { messages, message_tree, ...rest } = request(state);
    return JSON.parse(decideJson(agent, JSON.stringify(rest), new RecordingHost(), resource));
  }],
  ['agent', (agent, state, resource) => {
    const { messages, messageTree, ...rest } = toWit(types.DecisionRequest, request(state));
    return fromWit(types.DecisionResponse, decideWit(agent, rest, new RecordingHost(), resource));
  }],
];

/** Reads what `state.read` names and answers it in its state. */
class Reader extends Agent {
  decide(req) {
    const m = req.messages;
    switch (req.state.read) {
      case 'newest': return { state: { newest: m.at(-1), read: m.isRead } };
      case 'index': return { state: { newest: m[m.length - 1].id, read: m.isRead } };
      case 'last': return { state: { last: m.last(1).map((x) => x.id), read: m.isRead } };
      case 'many': return {
        state: {
          at7: m[7].id, slice: m.slice(-3).map((x) => x.id), slice2: m.slice(10, 12).map((x) => x.id),
          after: m.after('m3997')?.map((x) => x.id), none: m.after('nope'), position: m.position('m12'), read: m.isRead,
        },
      };
      case 'whole': return {
        state: { path: m.map((x) => x.id), tree: req.message_tree.nodes.map((n) => [n.message.id, n.parent_id ?? null]), head: req.message_tree.head_id },
      };
      default: return { state: {} };
    }
  }
}

for (const [world, decide] of WORLDS) {
  const typed = world === 'agent';
  test(`${world}: reading the newest message reads only it`, () => {
    const resource = new FakeResource(path(4000));
    assert.deepEqual(decide(new Reader(), { read: 'newest' }, resource).state, { newest: message(3999), read: false });
    assert.deepEqual(resource.calls, typed ? ['len', 'get 3999'] : ['len', 'rangeJson 3999..4000']);
  });

  test(`${world}: indexing by length reads the length and the message`, () => {
    const resource = new FakeResource(path(4000));
    assert.deepEqual(decide(new Reader(), { read: 'index' }, resource).state, { newest: 'm3999', read: false });
    assert.deepEqual(resource.calls, typed ? ['len', 'get 3999'] : ['len', 'rangeJson 3999..4000']);
  });

  test(`${world}: last(1) is the newest message`, () => {
    const resource = new FakeResource(path(4000));
    assert.deepEqual(decide(new Reader(), { read: 'last' }, resource).state, { last: ['m3999'], read: false });
    assert.deepEqual(resource.calls, typed ? ['last 1'] : ['len', 'rangeJson 3999..4000']);
  });

  test(`${world}: indices, slices, after and position read one answer each`, () => {
    const resource = new FakeResource(path(4000));
    assert.deepEqual(decide(new Reader(), { read: 'many' }, resource).state, {
      at7: 'm7', slice: ['m3997', 'm3998', 'm3999'], slice2: ['m10', 'm11'], after: ['m3998', 'm3999'],
      none: null, position: 12, read: false,
    });
    const r = typed ? 'range' : 'rangeJson';
    const a = typed ? 'after' : 'afterJson';
    assert.deepEqual(resource.calls, [
      typed ? 'get 7' : 'rangeJson 7..8', 'len', `${r} 3997..4000`, `${r} 10..12`, `${a} m3997`, `${a} nope`, 'position m12',
    ]);
  });

  test(`${world}: reading the whole branch and the tree gets exactly them, once`, () => {
    const resource = new FakeResource(path(5));
    const state = decide(new Reader(), { read: 'whole' }, resource).state;
    assert.deepEqual(state.path, ['m0', 'm1', 'm2', 'm3', 'm4']);
    assert.deepEqual(state.tree, [['m0', null], ['m1', 'm0'], ['m2', 'm1'], ['m3', 'm2'], ['m4', 'm3'], ['edited', 'm0']]);
    assert.equal(state.head, 'm4');
    assert.deepEqual(resource.calls, typed ? ['len', 'range 0..5', 'tree'] : ['len', 'rangeJson 0..5', 'treeJson']);
  });

  test(`${world}: an agent that reads nothing reads nothing`, () => {
    const resource = new FakeResource(path(5));
    decide(new Reader(), { read: 'nothing' }, resource);
    assert.deepEqual(resource.calls, []);
  });

  test(`${world}: a refused read fails the delivery with the engine's reason`, () => {
    const resource = new FakeResource(path(5));
    resource.live = false;
    const errors = console.error;
    console.error = () => {};
    try {
      assert.throws(() => decide(new Reader(), { read: 'newest' }, resource), (e) => {
        assert.match(e.message, /^BranchError: reading the branch \(len\): this messages resource belongs to a decision that is over$/);
        assert.equal(e.retryable, false);
        return true;
      });
    } finally {
      console.error = errors;
    }
  });
}

test('a branch read on demand is an array to its readers', () => {
  const resource = new FakeResource(path(6));
  const { messages } = (() => {
    let seen;
    decideJson({ decide: (r) => { seen = r; return {}; } }, JSON.stringify({ ...request(null), messages: undefined, message_tree: undefined }), new RecordingHost(), resource);
    return { messages: seen.messages };
  })();
  assert.ok(Array.isArray(messages));
  assert.equal(messages.length, 6);
  assert.equal(messages.find((m) => m.id === 'm4').content, 'text 4');
  assert.deepEqual([...messages].map((m) => m.id), ['m0', 'm1', 'm2', 'm3', 'm4', 'm5']);
  assert.deepEqual(JSON.parse(JSON.stringify(messages)), path(6));
  assert.deepEqual(Object.keys(messages), ['0', '1', '2', '3', '4', '5']);
  assert.ok(messages.isRead);
  assert.deepEqual(resource.calls, ['len', 'rangeJson 0..6']);
  messages.push(message(9));
  assert.equal(messages.at(-1).id, 'm9');
  assert.equal(messages.length, 7);
  assert.deepEqual(resource.calls, ['len', 'rangeJson 0..6']);
});

test('agent: reading the tree keeps the path by index without reading it whole', () => {
  const resource = new FakeResource(path(3));
  let seen;
  const { messages, messageTree, ...rest } = toWit(types.DecisionRequest, request(null));
  decideWit({ decide: (r) => { seen = r; return {}; } }, rest, new RecordingHost(), resource);
  assert.deepEqual(seen.message_tree.nodes.map((n) => n.message.id), ['m0', 'm1', 'm2', 'edited']);
  assert.equal(seen.messages.isRead, false);
  assert.equal(seen.messages.position('m2'), 2);
  assert.deepEqual(seen.messages.map((m) => m.id), ['m0', 'm1', 'm2']);
  assert.deepEqual(resource.calls, ['tree', 'len', 'range 0..3', 'position m2']);
});

test('a branch held in memory answers the same questions', () => {
  const req = requestFor({ type: 'session.start' }, { messages: path(4), message_tree: { nodes: [], head_id: 'm3' } });
  const messages = messagesOf(req);
  assert.equal(messagesOf(req), messages, 'wrapped once');
  assert.ok(Array.isArray(messages));
  assert.deepEqual(messages.last(2), [message(2), message(3)]);
  assert.deepEqual(messages.after('m1'), [message(2), message(3)]);
  assert.equal(messages.after('nope'), null);
  assert.equal(messages.position('m3'), 3);
  assert.equal(messages.tree.head_id, 'm3');
  assert.deepEqual(messages.slice(1, 3), [message(1), message(2)]);
  assert.ok(messages.isRead);
  assert.deepEqual(heldMessages(path(2)).tree, { nodes: [] });
});

test('decideJson of the testing host takes a request whose branch messagesOf wrapped', () => {
  const req = requestFor({ type: 'session.start' }, { messages: path(2) });
  messagesOf(req);
  const decision = new RecordingHost().decideJson({ decide: (r) => ({ state: { last: messagesOf(r).last(1)[0].id } }) }, req);
  assert.deepEqual(decision, { state: { last: 'm1' } });
});

test('a BranchError names itself', () => {
  assert.equal(new BranchError('x').name, 'BranchError');
});

// ---- a client.messages trigger's view ------------------------------------------

const draft = (i) => ({ id: `n${i}`, role: 'user', content: `new ${i}` });

/**
 * `agent` decides a `client.messages` request of `world` whose view is the
 * branch's first `shared` messages, then `rest`; what it saw is returned.
 */
function decideView(world, resource, { shared, rest, newFrom = shared }, read = () => ({})) {
  let seen;
  const agent = { decide: (r) => { seen = r; return { state: read(r.trigger.messages, r) }; } };
  const { messages, message_tree, ...request } = requestFor({ type: 'session.start' });
  let decision;
  if (world === 'agent-json') {
    const trigger = { type: 'client.messages', shared, messages: rest, new_from: newFrom, client: { state: { k: 1 } } };
    decision = JSON.parse(decideJson(agent, JSON.stringify({ ...request, trigger }), new RecordingHost(), resource));
  } else {
    const { messages: _, messageTree, ...wit } = toWit(types.DecisionRequest, { ...request, messages: [], message_tree: { nodes: [] } });
    wit.trigger = {
      tag: 'client-messages',
      val: { shared, rest: rest.map((m) => toWit(types.DraftMessage, m)), newFrom, client: toWit(types.ClientContext, { state: { k: 1 } }) },
    };
    decision = fromWit(types.DecisionResponse, decideWit(agent, wit, new RecordingHost(), resource));
  }
  return { request: seen, view: seen.trigger.messages, state: decision.state };
}

for (const world of ['agent-json', 'agent']) {
  const typed = world === 'agent';
  const r = typed ? 'range' : 'rangeJson';

  test(`${world}: the view reads the branch only for indexes below shared`, () => {
    const resource = new FakeResource(path(10));
    const { request, view } = decideView(world, resource, { shared: 8, rest: [draft(8), draft(9)] });
    assert.ok(Array.isArray(view));
    assert.equal(view.length, 10);
    assert.deepEqual(view.at(-1), draft(9));
    assert.deepEqual(view[8], draft(8));
    assert.deepEqual(view.slice(8), [draft(8), draft(9)]);
    assert.deepEqual(view.last(2), [draft(8), draft(9)]);
    assert.deepEqual(resource.calls, [], 'the rest is the trigger\'s own');
    assert.deepEqual(view[3], message(3));
    assert.deepEqual(resource.calls, [typed ? 'get 3' : 'rangeJson 3..4']);
    assert.deepEqual(request.messages[3], message(3), 'read once, for both');
    assert.notEqual(view[3], request.messages[3], 'the view\'s message is its own');
    assert.deepEqual(view.slice(6, 9), [message(6), message(7), draft(8)]);
    assert.deepEqual(view.slice(-5, -3), [message(5), message(6)]);
    assert.deepEqual(resource.calls, [typed ? 'get 3' : 'rangeJson 3..4', 'len', `${r} 6..8`, `${r} 5..7`]);
    assert.equal(view.isRead, false);
    assert.equal(request.messages.isRead, false);
  });

  test(`${world}: slice(new_from) reads nothing of the branch when shared is new_from`, () => {
    const resource = new FakeResource(path(4000));
    const { state } = decideView(world, resource, { shared: 4000, rest: [draft(0), draft(1)] }, (view, req) => ({
      len: view.length,
      new: view.slice(req.trigger.new_from).map((m) => m.content),
      last: view.at(-1).id,
      read: view.isRead,
    }));
    assert.deepEqual(state, { len: 4002, new: ['new 0', 'new 1'], last: 'n1', read: false });
    assert.deepEqual(resource.calls, []);
  });

  test(`${world}: read whole, the view is the whole view, once, and the trigger reads as 0.1.0's`, () => {
    const resource = new FakeResource(path(10));
    const { request, view } = decideView(world, resource, { shared: 8, rest: [draft(8), draft(9)] });
    const whole = [...path(8), draft(8), draft(9)];
    assert.deepEqual([...view], whole);
    assert.deepEqual(view.map((m) => m.id), whole.map((m) => m.id));
    assert.deepEqual(JSON.parse(JSON.stringify(request.trigger)), {
      type: 'client.messages', messages: whole, new_from: 8, client: { state: { k: 1 } },
    });
    assert.deepEqual(Object.keys(request.trigger), ['type', 'messages', 'new_from', 'client']);
    assert.ok(view.isRead);
    assert.deepEqual(view[2], message(2));
    assert.deepEqual(resource.calls, ['len', `${r} 0..8`]);
    assert.equal(request.messages.isRead, false, 'the branch\'s first messages, read as a slice');
  });

  test(`${world}: position and after ask the branch only for its part`, () => {
    const resource = new FakeResource(path(10));
    const { view } = decideView(world, resource, { shared: 8, rest: [draft(8), draft(9)] });
    assert.equal(view.position('m2'), 2);
    assert.equal(view.position('n9'), 9);
    assert.equal(view.position('nope'), null);
    assert.deepEqual(view.after('m7'), [draft(8), draft(9)]);
    assert.deepEqual(view.after('m5'), [message(6), message(7), draft(8), draft(9)]);
    assert.deepEqual(resource.calls, [
      'position m2', 'position n9', 'position nope', 'position m7', 'position m5', 'len', `${r} 6..8`,
    ]);
  });

  test(`${world}: a view sharing nothing holds its messages`, () => {
    const resource = new FakeResource(path(3));
    const { request, view } = decideView(world, resource, { shared: 0, rest: [draft(0), draft(1)], newFrom: 1 });
    assert.ok(view.isRead);
    assert.deepEqual([...view], [draft(0), draft(1)]);
    assert.deepEqual(Object.keys(request.trigger), ['type', 'messages', 'new_from', 'client']);
    assert.deepEqual(resource.calls, []);
  });

  test(`${world}: a view kept past its decision throws a BranchError`, () => {
    const resource = new FakeResource(path(10));
    const { view } = decideView(world, resource, { shared: 8, rest: [draft(8), draft(9)] });
    resource.live = false;
    assert.deepEqual(view.at(-1), draft(9), 'the rest is held');
    assert.throws(() => view[0], (e) => e instanceof BranchError && /decision that is over/.test(e.message));
    assert.throws(() => [...view], BranchError);
  });
}

test('agent-json: a trigger without shared holds its whole view', () => {
  const resource = new FakeResource(path(3));
  let seen;
  const { messages, message_tree, ...request } = requestFor({ type: 'session.start' });
  const trigger = { type: 'client.messages', messages: [draft(0)], new_from: 0, client: {} };
  decideJson({ decide: (r) => { seen = r; return {}; } }, JSON.stringify({ ...request, trigger }), new RecordingHost(), resource);
  assert.deepEqual([...seen.trigger.messages], [draft(0)]);
  assert.ok(seen.trigger.messages.isRead);
  assert.deepEqual(resource.calls, []);
});

test('agent-json: a trigger whose shared is not a count fails the delivery', () => {
  const { messages, message_tree, ...request } = requestFor({ type: 'session.start' });
  const trigger = { type: 'client.messages', shared: -1, messages: [], new_from: 0, client: {} };
  assert.throws(
    () => decideJson({ decide: () => ({}) }, JSON.stringify({ ...request, trigger }), new RecordingHost(), new FakeResource([])),
    (e) => /cannot read: trigger.shared/.test(e.message) && e.retryable === false,
  );
});

test('a view that arrives whole (0.1.0, requestFor, RecordingHost) is held, and answers the same', () => {
  const trigger = () => ({ type: 'client.messages', messages: [message(0), draft(1)], new_from: 1, client: {} });
  const views = [];
  const agent = { decide: (r) => { views.push(r.trigger.messages); return { state: r.trigger.messages.slice(r.trigger.new_from) }; } };
  const host = new RecordingHost();
  const req = requestFor(trigger());
  host.decide(agent, req);
  host.decide(agent, { ...requestFor({ type: 'session.start' }), trigger: trigger() });
  assert.deepEqual(host.decideJson(agent, req).state, [draft(1)], 'a request holding a view is cloned');
  host.decideJson(agent, JSON.stringify({ ...requestFor({ type: 'session.start' }), messages: [], trigger: trigger() }));
  const { messages, message_tree, ...request } = requestFor(trigger());
  decideJson(agent, JSON.stringify({ ...request, messages: [], message_tree: { nodes: [] } }), new RecordingHost());
  decideWit(agent, toWit(types.DecisionRequest, { ...request, messages: [], message_tree: { nodes: [] } }), new RecordingHost());
  assert.equal(views.length, 6);
  for (const view of views) {
    assert.ok(Array.isArray(view));
    assert.ok(view.isRead);
    assert.deepEqual([...view], [message(0), draft(1)]);
    assert.equal(view.position('n1'), 1);
    assert.deepEqual(view.last(1), [draft(1)]);
  }
});
