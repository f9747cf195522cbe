// One session: what it is now (`GET /v1/sessions/{id}`), its conversation
// as a tree, its decisions turn by turn (decisions.js), what streams
// while a turn runs, and the inputs a client sends (a message, an
// interrupt's resume, a client tool's result, a cancel).

import { ApiError, enc, follow, json, post } from './api.js';
import { badge, brief, fill, h, notice, pretty, raw, textOf, usageText } from './dom.js';
import { Decisions } from './decisions.js';

export function sessionView(main, id) {
  const started = performance.now();
  const path = `/v1/sessions/${enc(id)}`;
  const root = h('article', { class: 'session', testid: 'session', data: { sessionId: id, loaded: 'false' } });
  const header = h('header', { class: 'session-head' });
  const actions = h('section', { class: 'panel', 'aria-labelledby': 'act-title' });
  const live = h('section', { class: 'panel', 'aria-labelledby': 'live-title' });
  const conversation = h('section', { class: 'panel', 'aria-labelledby': 'conv-title' });
  const timeline = h('section', { class: 'panel', 'aria-labelledby': 'timeline-title' });
  fill(root, header, h('div', { class: 'columns' }, h('div', { class: 'col' }, conversation, live, actions), h('div', { class: 'col' }, timeline)));
  fill(main, h('p', {}, h('a', { href: '#/sessions' }, '← Sessions')), root);

  let snapshot = null;
  let stopped = false;
  // Which child each fork shows (parent id → child id); unset: the active
  // path's child.
  const choice = new Map();
  let treeKey = '';
  const decisions = new Decisions(path, timeline);

  // ---- acting ----------------------------------------------------------
  const result = h('p', { class: 'muted', testid: 'action-result', role: 'status' });
  const message = h('textarea', { id: 'msg', rows: 3, testid: 'message-input', placeholder: 'use tool add with {"a": 1, "b": 2}' });
  const sendForm = h(
    'form', { class: 'stack', onsubmit: (e) => { e.preventDefault(); send(); } },
    h('label', { for: 'msg' }, 'Message'), message,
    h('div', { class: 'row' },
      h('button', { type: 'submit', testid: 'send-message' }, 'Send'),
      h('button', { type: 'button', testid: 'cancel-turn', onclick: cancel }, 'Cancel turn')),
  );
  // Ctrl/Cmd+Enter sends.
  message.addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) {
      e.preventDefault();
      send();
    }
  });
  const waiting = h('div', { testid: 'waiting' });
  let waitingKey = null;
  // The interrupts answered so far, newest first, from the session's
  // stored `interrupt` and `interrupt.resumed` events (the snapshot lists
  // only the open ones).
  const answered = h('ol', { class: 'events', testid: 'answered-interrupts', reversed: true });
  const answeredPanel = h('details', { hidden: true, open: true }, h('summary', {}, 'Answered interrupts'), answered);
  fill(actions, h('h2', { id: 'act-title' }, 'Act'), sendForm, waiting, result, answeredPanel);

  // What the latest action says: an answer that comes back after a later
  // action started (a send answered after the cancel that followed it)
  // does not overwrite what that later action shows.
  let latest = 0;
  function say(action, text) {
    if (action === latest) result.textContent = text;
  }

  async function act(what, body) {
    const action = ++latest;
    say(action, `${what}…`);
    try {
      const answer = await post(`${path}/input`, body);
      say(action, `${what}: ${brief(answer)}`);
      schedule();
    } catch (e) {
      say(action, `${what} failed: ${e.message}`);
    }
  }

  function send() {
    const text = message.value;
    if (!text.trim() || !snapshot) return;
    message.value = '';
    act('Sent', { type: 'client.message', agent_id: snapshot.agent_id, message: { role: 'user', content: text } });
  }

  async function cancel() {
    const action = ++latest;
    say(action, 'Cancelling…');
    try {
      const answer = await post(`${path}/cancel`);
      say(action, answer && answer.cancelled ? 'Cancelled the turn.' : 'No turn was open.');
      schedule();
    } catch (e) {
      say(action, `Cancel failed: ${e.message}`);
    }
  }

  /** JSON from a text area: undefined when empty; throws on bad JSON. */
  function parsed(area) {
    const text = area.value.trim();
    if (!text) return undefined;
    return JSON.parse(text);
  }

  function renderWaiting(s) {
    const clientCalls = (s.calls || []).filter((c) => c && c.handler === 'client' && c.status === 'pending');
    const key = JSON.stringify([s.interrupts, clientCalls.map((c) => [c.id, c.attempt])]);
    if (key === waitingKey) return;
    waitingKey = key;
    const forms = [];
    (s.interrupts || []).forEach((it, i) => {
      const area = h('textarea', { id: `resume-${i}`, rows: 3, testid: 'resume-payload', placeholder: '{"approved": true}' });
      forms.push(h(
        'form', { class: 'card', testid: 'interrupt', data: { interruptId: String(it.interrupt_id) },
          onsubmit: (e) => {
            e.preventDefault();
            let payload;
            try { payload = parsed(area); } catch (err) { say(++latest, `The payload is not JSON: ${err.message}`); area.focus(); return; }
            act('Resumed', { type: 'interrupt.resume', interrupt_id: it.interrupt_id, ...(payload === undefined ? {} : { payload }) });
          } },
        h('h3', {}, 'Interrupt ', h('code', {}, String(it.interrupt_id))),
        h('p', {}, String(it.reason ?? '')),
        it.payload !== undefined && it.payload !== null ? h('pre', { testid: 'interrupt-payload' }, pretty(it.payload)) : null,
        it.resume_schema !== undefined && it.resume_schema !== null
          ? h('details', {}, h('summary', {}, 'The payload must satisfy this schema'), h('pre', { testid: 'interrupt-schema' }, pretty(it.resume_schema)))
          : null,
        h('label', { for: `resume-${i}` }, it.resume_schema ? 'Resume payload (JSON)' : 'Resume payload (JSON, optional)'), area,
        h('button', { type: 'submit', testid: 'resume-interrupt' }, 'Resume'),
      ));
    });
    clientCalls.forEach((c, i) => {
      const area = h('textarea', { id: `tool-${i}`, rows: 3, testid: 'tool-result-input', placeholder: '{"ok": true}' });
      const answer = (type) => {
        if (type === 'tool.error') {
          act('Sent the error', { type, id: c.id, attempt: c.attempt, error: area.value.trim() || 'failed', retryable: false });
          return;
        }
        let value;
        try { value = parsed(area); } catch (err) { say(++latest, `The result is not JSON: ${err.message}`); area.focus(); return; }
        act('Sent the result', { type, id: c.id, attempt: c.attempt, ...(value === undefined ? {} : { result: value }) });
      };
      forms.push(h(
        'form', { class: 'card', testid: 'client-call', data: { callId: String(c.id) }, onsubmit: (e) => { e.preventDefault(); answer('tool.result'); } },
        h('h3', {}, 'Client tool ', h('code', {}, String(c.name ?? '')), ' ', h('span', { class: 'muted' }, String(c.id))),
        h('pre', {}, String(c.arguments ?? '')),
        h('label', { for: `tool-${i}` }, 'Result (JSON), or the error text'), area,
        h('div', { class: 'row' },
          h('button', { type: 'submit', testid: 'send-tool-result' }, 'Send result'),
          h('button', { type: 'button', testid: 'send-tool-error', onclick: () => answer('tool.error') }, 'Send error')),
      ));
    });
    fill(waiting, forms.length ? [h('h3', { class: 'sr-only' }, 'Waiting for you'), forms] : null);
  }

  // ---- what streams ----------------------------------------------------
  const liveText = h('pre', { class: 'live-text', testid: 'live-text', 'aria-live': 'off' });
  const streamState = h('span', { class: 'muted', testid: 'stream-state' }, 'connecting');
  const log = h('ol', { class: 'events', testid: 'event-log', reversed: true });
  fill(live, h('h2', { id: 'live-title' }, 'Live ', streamState), liveText,
    h('details', {}, h('summary', {}, 'Events'), log));

  // An open interrupt's reason, by id, until it is answered; both lists
  // are bounded so a long session cannot grow the page without end.
  const reasons = new Map();
  function onInterrupt(name, data) {
    const id = String(data && data.interrupt_id);
    if (name === 'interrupt') {
      reasons.set(id, String(data.reason ?? ''));
      if (reasons.size > 1000) reasons.delete(reasons.keys().next().value);
      return;
    }
    const reason = reasons.get(id);
    reasons.delete(id);
    answered.prepend(h('li', { testid: 'answered-interrupt', data: { interruptId: id } },
      h('code', {}, id), reason ? ` (${reason})` : '',
      ' answered with ', h('code', { testid: 'answered-payload' }, brief(data.payload ?? null, 200)),
      ' by ', h('span', { testid: 'answered-by' }, resumer(data.resumed_by))));
    if (answered.childElementCount > 100) answered.lastElementChild.remove();
    answeredPanel.hidden = false;
  }

  function onEvent(name, data, seq) {
    if ((name === 'interrupt' || name === 'interrupt.resumed') && data) onInterrupt(name, data);
    if (name === 'llm.token.delta') {
      if (data && typeof data.text === 'string') liveText.append(document.createTextNode(data.text));
      if (data && Array.isArray(data.tool_calls)) {
        for (const t of data.tool_calls) liveText.append(document.createTextNode(t.name ? `\n→ ${t.name} ` : (t.arguments ?? '')));
      }
      return;
    }
    if (name === 'turn.started') liveText.replaceChildren();
    log.prepend(h('li', { testid: 'event', data: { event: name } }, h('code', {}, name), seq !== null ? ` #${seq} ` : ' ', brief(data, 120)));
    if (log.childElementCount > 100) log.lastElementChild.remove();
    schedule();
  }

  // ---- the conversation ------------------------------------------------
  function renderConversation(s) {
    const nodes = (s.message_tree && Array.isArray(s.message_tree.nodes)) ? s.message_tree.nodes : (s.messages || []).map((m, i, all) => ({ message: m, parent_id: i ? all[i - 1].id : null }));
    const head = s.message_tree ? s.message_tree.head_id : null;
    const key = `${nodes.length}|${head}|${[...choice].join(',')}`;
    if (key === treeKey) return;
    treeKey = key;
    const byId = new Map();
    const children = new Map();
    for (const n of nodes) {
      if (!n || !n.message) continue;
      byId.set(n.message.id, n);
      const p = n.parent_id ?? null;
      if (!children.has(p)) children.set(p, []);
      children.get(p).push(n.message.id);
    }
    const active = new Set();
    for (let at = head; at !== null && at !== undefined && byId.has(at) && !active.has(at); at = byId.get(at).parent_id ?? null) active.add(at);
    const items = [];
    let parent = null;
    const seen = new Set();
    for (;;) {
      const kids = children.get(parent) || [];
      if (!kids.length) break;
      const chosen = choice.get(parent) ?? kids.find((k) => active.has(k)) ?? kids[kids.length - 1];
      if (seen.has(chosen)) break;
      seen.add(chosen);
      if (kids.length > 1) items.push(fork(parent, kids, chosen, active));
      items.push(messageView(byId.get(chosen).message, active.has(chosen)));
      parent = chosen;
    }
    const off = [...seen].some((m) => !active.has(m));
    fill(conversation,
      h('h2', { id: 'conv-title' }, 'Conversation ', h('span', { class: 'muted' }, `${nodes.length} messages`)),
      off ? h('p', { class: 'notice info', role: 'status' }, 'Showing a branch off the active path. ',
        h('button', { type: 'button', testid: 'show-active', onclick: () => { choice.clear(); treeKey = ''; renderConversation(snapshot); } }, 'Back to the active path')) : null,
      items.length ? h('ol', { class: 'messages', testid: 'conversation' }, items) : notice('No messages yet.'));
  }

  function fork(parent, kids, chosen, active) {
    const at = kids.indexOf(chosen);
    const pick = (i) => {
      choice.set(parent, kids[(i + kids.length) % kids.length]);
      renderConversation(snapshot);
      const again = conversation.querySelector(`[data-fork="${CSS.escape(String(parent))}"] button`);
      if (again) again.focus();
    };
    return h('li', { class: 'fork', testid: 'fork', data: { fork: String(parent) } },
      h('button', { type: 'button', 'aria-label': 'Previous branch', onclick: () => pick(at - 1) }, '‹'),
      h('span', {}, `branch ${at + 1} of ${kids.length}`, active.has(chosen) ? ' (active)' : ''),
      h('button', { type: 'button', 'aria-label': 'Next branch', onclick: () => pick(at + 1) }, '›'));
  }

  function messageView(m, onPath) {
    const calls = Array.isArray(m.tool_calls) ? m.tool_calls : [];
    return h('li', { class: `msg r-${String(m.role).replace(/[^a-z]/g, '')}${onPath ? '' : ' off-path'}`, testid: 'message', data: { role: String(m.role), messageId: String(m.id) } },
      h('div', { class: 'msg-head' }, h('strong', {}, String(m.role)), m.name ? ` ${m.name}` : '', m.tool_call_id ? h('span', { class: 'muted' }, ` for ${m.tool_call_id}`) : '', h('span', { class: 'muted id' }, String(m.id ?? ''))),
      m.content !== undefined && m.content !== null && textOf(m.content) !== ''
        ? h('div', { class: 'msg-text', testid: m.role === 'tool' ? 'tool-result' : 'message-text' }, textOf(m.content)) : null,
      calls.map((c) => h('div', { class: 'tool-call', testid: 'tool-call' },
        '→ ', h('code', { testid: 'tool-call-name' }, String(c.function && c.function.name)), ' ',
        h('code', { testid: 'tool-call-args' }, String(c.function && c.function.arguments)),
        h('span', { class: 'muted' }, ` ${c.id ?? ''}`))),
      raw(m));
  }

  // ---- the header ------------------------------------------------------
  let headKey = '';
  function renderHeader(s) {
    root.dataset.status = s.status;
    // Re-rendered only when it changed, so an open <details> stays open.
    const key = JSON.stringify([s.status, s.turn_id, s.usage, s.cost, s.budget, s.state, s.agent, s.identity]);
    if (key === headKey) return;
    headKey = key;
    fill(header,
      h('h1', {}, 'Session ', h('code', { testid: 'session-id' }, String(s.session_id))),
      h('dl', { class: 'facts' },
        h('dt', {}, 'Status'), h('dd', {}, badge(s.status, 'session-status'), s.turn_id ? h('span', { class: 'muted' }, ` turn ${s.turn_id}`) : null),
        h('dt', {}, 'Agent'), h('dd', {}, h('a', { href: `#/agents/${enc(String(s.agent_id))}` }, String(s.agent_id)), s.agent && s.agent.model ? h('span', { class: 'muted' }, ` · ${s.agent.model}`) : null),
        h('dt', {}, 'Owner'), h('dd', {}, s.identity && s.identity.id ? String(s.identity.id) : '—'),
        h('dt', {}, 'Tokens'), h('dd', { testid: 'session-usage' }, usageText(s.usage)),
        h('dt', {}, 'Cost'), h('dd', { testid: 'session-cost' }, s.cost != null ? `$${s.cost}` : '—', s.budget != null ? ` of $${s.budget}` : ''),
        s.ancestry && s.ancestry.length ? [h('dt', {}, 'Parent'), h('dd', {}, h('a', { href: `#/sessions/${enc(s.ancestry[s.ancestry.length - 1])}` }, s.ancestry[s.ancestry.length - 1]))] : null),
      h('details', { class: 'state' }, h('summary', {}, 'State and config'),
        h('h3', {}, 'State'), h('pre', { testid: 'session-state' }, pretty(s.state)),
        h('h3', {}, 'Agent config'), h('pre', {}, pretty(s.agent))),
      raw(s, 'Raw snapshot'));
  }

  // ---- loading ---------------------------------------------------------
  let timer = null;
  let busy = false;
  let dirty = false;
  let first = true;

  function schedule(delay = 150) {
    if (stopped) return;
    if (busy) { dirty = true; return; }
    clearTimeout(timer);
    timer = setTimeout(refresh, delay);
  }

  async function refresh() {
    busy = true;
    dirty = false;
    try {
      const [s] = await Promise.all([json(path), decisions.load()]);
      if (stopped) return;
      snapshot = s;
      startFollowing();
      const t0 = performance.now();
      renderHeader(s);
      renderWaiting(s);
      renderConversation(s);
      decisions.render();
      const t1 = performance.now();
      if (first) {
        first = false;
        root.dataset.renderMs = (t1 - t0).toFixed(1);
        root.dataset.loadMs = (t1 - started).toFixed(1);
        root.dataset.loaded = 'true';
      }
    } catch (e) {
      if (stopped) return;
      const gone = e instanceof ApiError && e.status === 404;
      fill(header, notice(gone ? `No session ${id} (or not yours).` : `Cannot read the session: ${e.message}`, 'error'));
      root.dataset.loaded = gone ? 'missing' : 'error';
      // Nothing to follow: the stream would be refused again and again
      // (the slow poll below starts it again if the session appears).
      if (gone) stopFollowing();
    } finally {
      busy = false;
      if (!stopped) {
        if (dirty) schedule();
        // Events drive updates; a slow poll covers a stream that is down.
        else { clearTimeout(timer); timer = setTimeout(refresh, 10000); }
      }
    }
  }

  let unfollow = null;
  function startFollowing() {
    if (!unfollow) unfollow = follow(id, { onEvent, onState: (state) => { streamState.textContent = state; } });
  }
  function stopFollowing() {
    if (unfollow) unfollow();
    unfollow = null;
  }
  refresh();
  startFollowing();
  return () => {
    stopped = true;
    clearTimeout(timer);
    stopFollowing();
  };
}

/** Who resumed an interrupt, from its event's `resumed_by`. */
function resumer(by) {
  const id = by && by.identity && by.identity.id !== undefined ? String(by.identity.id) : null;
  if (by && by.kind === 'end_user') return id !== null ? `end user ${id}` : 'an end user';
  const key = by && typeof by.key === 'string' ? ` (key ${by.key})` : '';
  return `the tenant${key}${id !== null ? ` for ${id}` : ''}`;
}
