// A decision's branch: the active path (oldest first) and the session's
// message tree, held in memory or read on demand.
//
// An HTTP worker, a native test and a component built against
// `subs:agent@0.1.0` get the whole branch with the request: `messages` is
// an array. A component built against `subs:agent@0.2.0` (the default)
// gets it as the engine's `messages` resource, and `request.messages` is a
// `Messages` that reads only what the agent's code asks for, keeping what
// it read:
//
// - `messages.length`: one call, once;
// - `messages[i]`, `messages.at(i)` (`at(-1)` is the newest): one call for
//   the message (`at` with a negative index also reads the length, once);
//   a message read once is not read again;
// - `messages.slice(a, b)`: one call for the slice;
// - `messages.last(n)`, `messages.after(id)`, `messages.position(id)`: one
//   call each (`last` reads the length too, once, in `agent-json`);
// - `messages.tree` (and `request.message_tree`): the tree, once;
// - anything else an array has (iterating, `map`, `filter`, `find`,
//   `JSON.stringify`, `push`...): the whole path, once, then it is an array
//   in memory.
//
// Each call converts just the messages it returns, so a decision that
// reads only its trigger costs the same at the thousandth turn as at the
// first. The resource is valid only during its decision: a `Messages` kept
// past it (in a global) throws a BranchError when it needs to read.
//
// A `client.messages` trigger's `messages`, the client's view of the
// conversation, is read the same way in such a component: the engine sends
// its leading messages as a count (the first `shared` messages of the
// branch) and only the rest as messages, and the view (`clientView`) reads
// those leading messages through `request.messages` (so a message read
// through either is read once). `length` costs nothing, an index or a
// slice reads only the branch's messages it covers
// (`slice(trigger.new_from)` usually none), and what reads an array whole
// reads the view whole, once.

/** The engine refused a read of the branch: its decision is over. */
export class BranchError extends Error {
  constructor(message) {
    super(message);
    this.name = 'BranchError';
  }
}

const INDEX = /^(0|[1-9][0-9]*)$/;

/**
 * The branch read on demand from `source` (`len`, `get`, `range`, `last`,
 * `after`, `position`, `tree`: see `MessageSource` in index.d.ts), as an
 * array-like `Messages`.
 */
export function lazyMessages(source) {
  return array(new Branch(source, null, null));
}

/**
 * A branch held in memory, `path` an array of messages and `tree` the
 * message tree (read on demand, or `undefined`), as a `Messages`.
 */
export function heldMessages(path, tree) {
  return array(new Branch(null, path, tree ?? null));
}

/**
 * A `client.messages` trigger's view: the first `shared` messages of
 * `branch` (a `Messages`, which keeps what it reads), then `rest`, as an
 * array-like `Messages` read on demand; held when nothing is shared.
 * `shared` is not checked against the branch's length, which would read it.
 */
export function clientView(branch, shared, rest) {
  if (!(shared > 0)) return heldMessages(rest, { nodes: [] });
  return array(new Branch(viewSource(branch, shared, rest), null, { nodes: [] }));
}

/**
 * A view's source: its first `shared` messages the branch's, copied (the
 * view's are its own, as they are when it holds them all), then `rest`.
 */
function viewSource(branch, shared, rest) {
  const len = shared + rest.length;
  const draft = (m) => (m === undefined ? undefined : { ...m });
  // `start` and `end` within the view, as Branch asks.
  const range = (start, end) => {
    const own = end > shared ? rest.slice(Math.max(0, start - shared), end - shared) : [];
    return start < shared ? branch.slice(start, Math.min(end, shared)).map(draft).concat(own) : own;
  };
  const position = (id) => {
    // The branch first: a view's message is found where it first is.
    const i = branch.position(id);
    if (i !== null && i < shared) return i;
    const k = rest.findIndex((m) => m.id === id);
    return k < 0 ? null : shared + k;
  };
  return {
    len: () => len,
    get: (i) => (i < shared ? draft(branch.at(i)) : rest[i - shared]),
    range,
    last: (n) => range(Math.max(0, len - n), len),
    after: (id) => {
      const i = position(id);
      return i === null ? null : range(i + 1, len);
    },
    position,
  };
}

/**
 * `request.messages` as a `Messages` (lazy in a component built against
 * `subs:agent@0.2.0`; an array elsewhere, wrapped once with the request's
 * `message_tree`): what gives `last`, `after`, `position` and `tree` to
 * agent code that runs in either. A `client.messages` trigger's view, an
 * array elsewhere too, is wrapped the same way (held: `isRead`).
 */
export function messagesOf(request) {
  const trigger = request.trigger;
  if (trigger?.type === 'client.messages' && Array.isArray(trigger.messages) && !trigger.messages[BRANCH]) {
    request.trigger = { ...trigger, messages: clientView(null, 0, trigger.messages) };
  }
  const messages = request.messages;
  if (messages && messages[BRANCH]) return messages;
  const held = heldMessages(Array.isArray(messages) ? messages : [], request.message_tree);
  request.messages = held;
  return held;
}

const BRANCH = Symbol('subs.branch');

class Branch {
  constructor(source, path, tree) {
    this.source = source;
    this.path = path;
    this.treeRead = tree;
    this.len = null;
    this.read = new Map();
  }

  whole() {
    if (this.path === null) {
      const n = this.length;
      this.path = n ? this.slice(0, n) : [];
      this.read = new Map();
    }
    return this.path;
  }

  get length() {
    if (this.path !== null) return this.path.length;
    if (this.len === null) this.len = this.source.len();
    return this.len;
  }

  get isRead() {
    return this.path !== null;
  }

  /** The message at `index` (negative counts from the end); undefined outside. */
  at(index) {
    if (this.path !== null) return this.path.at(index);
    let i = Math.trunc(Number(index)) || 0;
    if (i < 0) i += this.length;
    if (i < 0) return undefined;
    const known = this.read.get(i);
    if (known !== undefined) return known;
    if (this.len !== null && i >= this.len) return undefined;
    const message = this.source.get(i);
    if (message !== undefined && message !== null) this.read.set(i, message);
    return message ?? undefined;
  }

  /** The messages from `start` to `end`, as `Array.prototype.slice` takes them. */
  slice(start, end) {
    if (this.path !== null) return this.path.slice(start, end);
    const n = this.length;
    const from = clip(start, 0, n);
    const to = clip(end, n, n);
    if (from >= to) return [];
    let cached = true;
    for (let i = from; i < to && cached; i++) cached = this.read.has(i);
    if (cached) {
      const out = [];
      for (let i = from; i < to; i++) out.push(this.read.get(i));
      return out;
    }
    const got = this.source.range(from, to);
    got.forEach((m, k) => this.read.set(from + k, m));
    return got;
  }

  /** The last `n` messages, oldest first (all of them when there are fewer). */
  last(n) {
    if (!(n > 0)) return [];
    if (this.path !== null) return this.path.slice(-n);
    if (this.len !== null) return this.slice(Math.max(0, this.len - n));
    return this.source.last(n, this);
  }

  /** The messages after the one whose id is `id`; null when none has it. */
  after(id) {
    if (this.path !== null) {
      const i = this.position(id);
      return i === null ? null : this.path.slice(i + 1);
    }
    return this.source.after(id);
  }

  /** The index of the message whose id is `id`; null when none has it. */
  position(id) {
    if (this.path !== null) {
      const i = this.path.findIndex((m) => m.id === id);
      return i < 0 ? null : i;
    }
    return this.source.position(id);
  }

  /** The session's message tree (`{nodes, head_id}`), read once. */
  get tree() {
    if (this.treeRead === null) this.treeRead = this.source ? this.source.tree(this) : { nodes: [] };
    return this.treeRead;
  }

  toJSON() {
    return this.whole();
  }

  [Symbol.iterator]() {
    return this.whole()[Symbol.iterator]();
  }
}

/** `Array.prototype.slice`'s reading of a bound. */
function clip(bound, absent, n) {
  if (bound === undefined) return absent;
  let i = Math.trunc(Number(bound)) || 0;
  if (i < 0) i = Math.max(0, n + i);
  return Math.min(i, n);
}

const OWN = new Set(['length', 'isRead', 'at', 'slice', 'last', 'after', 'position', 'tree', 'toJSON']);

/**
 * `branch` as an array to its readers: a proxy over an empty array (so
 * `Array.isArray` holds) that answers what `Branch` reads lazily, and
 * everything else from the path read whole.
 */
function array(branch) {
  return new Proxy([], {
    get(_, prop) {
      if (prop === BRANCH) return true;
      if (prop === Symbol.iterator) return () => branch[Symbol.iterator]();
      if (typeof prop === 'string') {
        if (OWN.has(prop)) {
          const v = branch[prop];
          return typeof v === 'function' ? v.bind(branch) : v;
        }
        if (INDEX.test(prop)) return branch.at(Number(prop));
      }
      const path = branch.whole();
      const v = path[prop];
      return typeof v === 'function' ? v.bind(path) : v;
    },
    set(_, prop, value) {
      if (prop === 'tree') branch.treeRead = value;
      else branch.whole()[prop] = value;
      return true;
    },
    has(_, prop) {
      if (typeof prop === 'string' && INDEX.test(prop)) return Number(prop) < branch.length;
      return OWN.has(prop) || prop in branch.whole();
    },
    deleteProperty(_, prop) {
      return delete branch.whole()[prop];
    },
    ownKeys() {
      return Reflect.ownKeys(branch.whole());
    },
    getOwnPropertyDescriptor(target, prop) {
      const own = Reflect.getOwnPropertyDescriptor(branch.whole(), prop);
      // The proxy's own `length` is the empty target's (which cannot be
      // reported otherwise configurable); every other property is the path's.
      if (prop === 'length') return { ...Reflect.getOwnPropertyDescriptor(target, prop), value: own.value };
      return own;
    },
  });
}
