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
