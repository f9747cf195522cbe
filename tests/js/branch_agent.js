// A test agent that reads its decision's branch on demand (`request.messages`
// over the `messages` resource of subs:agent@0.2.0) and reports what it read
// in its `state`, so a test can hold each answer against what the engine
// stored; it answers with its `proposed` decision otherwise. The JavaScript
// twin of `tests/components/branch`.
//
// `state.read` reports, without reading the branch whole: `len`, the `last`
// message (id, role, text), `first` (the message at index 0), `after_first`
// (how many messages follow the first), `position_last` (the last message's
// index, by id), the last two ids (`last_2`), whether that read the path
// whole (`whole`: it must not), and the tree (`tree`: each node's id and
// parent id). `state.path` is every id of the path read whole, when the
// client asked for it (`client.action` named `whole`).
//
// `state.view` reports what it read of a `client.messages` trigger's view
// (its leading messages shared with the branch): `len`, `new_from`, the
// `first` and `last` messages, the `new` ones (from `new_from` on), whether
// that read the view whole (`whole`: it must not), then every id of the
// view read whole (`ids`). Other triggers carry the previous `state.view`
// over.
//
// It keeps each decision's branch in a global. When one instance is asked
// again (the engine never does; a test of the host does), it reads the kept
// branch first: that read must fail, as the branch belongs to a decision
// that is over, and the failure fails the decision.
import { Agent, exportAgent, messageText, messagesOf } from '../../guest-sdk/js/src/index.js';

// The branch of this instance's previous decision.
let kept = null;

const summary = (m) => (m === undefined ? null : { id: m.id ?? null, role: m.role, text: messageText(m) });

function readView(trigger) {
  const view = trigger.messages;
  const n = view.length;
  const out = {
    len: n,
    new_from: trigger.new_from,
    first: n ? summary(view[0]) : null,
    last: n ? summary(view[n - 1]) : null,
    new: view.slice(trigger.new_from).map(summary),
  };
  // None of the reads above read the view whole; the ids below do.
  out.whole = view.isRead;
  out.ids = view.map((m) => m.id ?? null);
  return out;
}

class BranchReader extends Agent {
  decide(request) {
    const messages = messagesOf(request);
    const previous = kept;
    kept = messages;
    // Asks the engine (a position is never kept): it refuses.
    if (previous !== null) previous.position('m0');
    const first = messages.length ? messages[0] : undefined;
    const last = messages.length ? messages.at(-1) : undefined;
    const after = first === undefined ? null : messages.after(first.id);
    const read = {
      len: messages.length,
      last: summary(last),
      first: summary(first),
      after_first: after === null ? null : after.length,
      position_last: last === undefined ? null : messages.position(last.id),
      last_2: messages.last(2).map((m) => m.id),
    };
    // None of the reads above read the path whole; the tree's does (typed
    // world) or not (agent-json: the tree comes whole as JSON).
    read.whole = messages.isRead;
    read.tree = request.message_tree.nodes.map((n) => ({ id: n.message.id, parent: n.parent_id ?? null }));
    const state = { read };
    if (request.trigger.type === 'client.action' && request.trigger.name === 'whole') {
      state.path = messages.map((m) => m.id);
    }
    state.view = request.trigger.type === 'client.messages' ? readView(request.trigger) : (request.state?.view ?? null);
    return { ...request.proposed, state };
  }
}

export const decide = exportAgent(new BranchReader());
