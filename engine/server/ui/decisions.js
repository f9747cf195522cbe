// A session's decisions, turn by turn: `GET /v1/sessions/{id}/decisions`
// (`?after=<seq>&limit=<n>`, paged by `Link: rel="next"`). Each shows its
// trigger, what it decided, the state it changed (a diff against the
// decision before it), the agent version it ran, its attempts and
// latency, and the calls it started. A decision's details are built when
// it is opened, so a session of hundreds of decisions renders its
// summaries only.

import { ApiError, page } from './api.js';
import { badge, brief, fill, h, ms, notice, pretty, raw, short, textOf, usageText, when } from './dom.js';

const LIMIT = 1000;

export class Decisions {
  constructor(sessionPath, section) {
    this.path = `${sessionPath}/decisions`;
    this.section = section;
    this.items = [];
    this.error = null;
    this.open = new Set();
    this.key = null;
  }

  /**
   * Fetches every decision, 1000 a page. A decided decision's calls still
   * change (their outcome comes from the later trigger that settled
   * them, which the server joins in when it is on the same page), so
   * the whole list is read again rather than only what is new.
   */
  async load() {
    const fresh = [];
    let url = `${this.path}?limit=${LIMIT}`;
    try {
      while (url) {
        const { items, next } = await page(url, { noAsk: true });
        if (!Array.isArray(items)) break;
        fresh.push(...items);
        url = next;
      }
      this.items = fresh;
      this.error = null;
    } catch (e) {
      this.error = e instanceof ApiError && e.status === 404 && e.code === 'not_found' && /route/.test(e.message)
        ? 'This server does not record decisions (no /decisions route).'
        : `Cannot read the decisions: ${e.message}`;
    }
  }

  render() {
    const items = this.items;
    // Rebuilt only when a decision or one of its calls changed state.
    const key = `${this.error}|${items.map((d) => `${d.seq}:${d.status}:${d.attempts}:${(d.calls || []).map((c) => c.status).join(',')}`).join(';')}`;
    if (key === this.key) return;
    this.key = key;
    const title = h('h2', { id: 'timeline-title' }, 'Timeline ', h('span', { class: 'muted', testid: 'decision-count' }, `${items.length} decisions`));
    if (this.error) {
      fill(this.section, title, notice(this.error, 'error'));
      return;
    }
    // Turns in the order they first decided; decisions by seq within.
    const turns = new Map();
    let previousState;
    for (const d of items) {
      const turn = d.turn_id ?? '(no turn)';
      if (!turns.has(turn)) turns.set(turn, []);
      const before = previousState;
      if (d.decision && d.decision.state !== undefined && d.decision.state !== null) previousState = d.decision.state;
      turns.get(turn).push({ d, before });
    }
    const sections = [];
    for (const [turn, list] of turns) {
      const versions = new Set(list.map(({ d }) => d.agent_version).filter(Boolean));
      sections.push(h('section', { class: 'turn', testid: 'turn', data: { turnId: String(turn) } },
        h('h3', {}, 'Turn ', h('code', {}, String(turn)), h('span', { class: 'muted' }, ` · ${list.length} decisions`,
          versions.size ? ` · agent ${[...versions].map(short).join(', ')}` : '')),
        h('ol', { class: 'decisions' }, list.map(({ d, before }) => this.decision(d, before)))));
    }
    fill(this.section, title, sections.length ? sections : notice('No decisions yet.'));
  }

  decision(d, before) {
    const trigger = d.trigger || {};
    const calls = Array.isArray(d.calls) ? d.calls : [];
    const details = h('details', { class: 'decision', testid: 'decision', data: { seq: String(d.seq), trigger: String(trigger.type ?? '') } },
      h('summary', {},
        h('span', { class: 'seq' }, `#${d.seq}`), ' ',
        h('code', { testid: 'trigger-type' }, String(trigger.type ?? '?')), ' ',
        badge(d.status ?? '—'), ' ',
        h('span', { class: 'muted' }, ms(d.latency_ms)),
        d.attempts > 1 ? h('span', { class: 'warn' }, ` · ${d.attempts} attempts`) : null,
        calls.length ? h('span', { class: 'muted' }, ` · ${calls.length} call${calls.length > 1 ? 's' : ''}`) : null,
        d.agent_version ? h('span', { class: 'muted', title: String(d.agent_version) }, ` · ${short(d.agent_version)}`) : null,
        d.error ? h('span', { class: 'err' }, ` · ${brief(d.error, 80)}`) : null));
    const build = () => details.append(this.body(d, before));
    if (this.open.has(d.seq)) {
      details.open = true;
      build();
    }
    details.addEventListener('toggle', () => {
      if (details.open) {
        this.open.add(d.seq);
        if (details.childElementCount === 1) build();
      } else this.open.delete(d.seq);
    });
    return h('li', {}, details);
  }

  body(d, before) {
    const trigger = d.trigger || {};
    const decision = d.decision;
    const calls = Array.isArray(d.calls) ? d.calls : [];
    return h('div', { class: 'decision-body' },
      h('dl', { class: 'facts' },
        h('dt', {}, 'Decision'), h('dd', {}, String(d.decision_id ?? '—')),
        h('dt', {}, 'Agent version'), h('dd', { testid: 'agent-version' }, String(d.agent_version ?? '—')),
        h('dt', {}, 'Attempts'), h('dd', {}, String(d.attempts ?? '—')),
        h('dt', {}, 'Requested'), h('dd', {}, when(d.requested_ms)),
        h('dt', {}, 'Decided'), h('dd', {}, when(d.decided_ms), ` (${ms(d.latency_ms)})`),
        Array.isArray(d.recorded) && d.recorded.length ? [h('dt', {}, 'Recorded'), h('dd', {}, d.recorded.join(', '))] : null,
        d.error ? [h('dt', {}, 'Error'), h('dd', { class: 'err' }, brief(d.error, 2000))] : null),
      h('h4', {}, 'Trigger ', h('code', {}, String(trigger.type ?? '?'))),
      triggerFields(trigger),
      h('h4', {}, 'Decided'),
      decision ? decided(decision) : h('p', { class: 'muted' }, 'Nothing yet.'),
      decision && decision.state !== undefined && decision.state !== null
        ? [h('h4', {}, 'State change'), stateDiff(before, decision.state)] : null,
      calls.length ? [h('h4', {}, 'Calls'), callTable(calls)] : null,
      raw(d));
  }
}

/** The trigger's fields that say what happened, each on a line. */
function triggerFields(trigger) {
  const rows = [];
  for (const [k, v] of Object.entries(trigger)) {
    if (k === 'type') continue;
    if ((k === 'messages' || k === 'new') && Array.isArray(v)) {
      rows.push(h('li', {}, h('strong', {}, 'messages: '), v.map((m) => h('div', {}, `${m.role}: ${brief(textOf(m.content), 300)}`))));
    } else {
      rows.push(h('li', {}, h('strong', {}, `${k}: `), h('code', {}, brief(v, 400))));
    }
  }
  return rows.length ? h('ul', { class: 'fields', testid: 'trigger-fields' }, rows) : h('p', { class: 'muted' }, 'No fields.');
}

/** A decision's messages and actions. */
function decided(decision) {
  const messages = Array.isArray(decision.messages) ? decision.messages : [];
  const actions = Array.isArray(decision.actions) ? decision.actions : [];
  if (!messages.length && !actions.length) return h('p', { class: 'muted' }, 'No messages, no actions.');
  return h('ul', { class: 'fields' },
    messages.map((m) => h('li', { testid: 'decided-message' }, h('strong', {}, `${m.role}: `), brief(textOf(m.content), 500),
      Array.isArray(m.tool_calls) ? m.tool_calls.map((c) => h('div', {}, '→ ', h('code', {}, `${c.function && c.function.name} ${c.function && c.function.arguments}`))) : null)),
    actions.map((a) => {
      const { type, ...rest } = a || {};
      return h('li', { testid: 'action' }, h('code', {}, String(type ?? '?')), ' ', h('span', { class: 'muted' }, brief(rest, 400)));
    }));
}

/** Every leaf of a JSON value by its path (`/a/0/b`). */
function leaves(value, path = '', out = new Map()) {
  if (value && typeof value === 'object') {
    const entries = Array.isArray(value) ? value.map((v, i) => [String(i), v]) : Object.entries(value);
    if (!entries.length) out.set(path || '/', Array.isArray(value) ? '[]' : '{}');
    for (const [k, v] of entries) leaves(v, `${path}/${k.replace(/~/g, '~0').replace(/\//g, '~1')}`, out);
  } else out.set(path || '/', JSON.stringify(value));
  return out;
}

/** The state change: added, removed and changed leaves. */
function stateDiff(before, after) {
  const a = leaves(before === undefined ? null : before);
  const b = leaves(after);
  if (before === undefined) a.clear();
  const rows = [];
  for (const [p, v] of b) {
    if (!a.has(p)) rows.push(h('li', { class: 'add' }, h('code', {}, `+ ${p} `), v));
    else if (a.get(p) !== v) rows.push(h('li', { class: 'chg' }, h('code', {}, `~ ${p} `), `${a.get(p)} → ${v}`));
  }
  for (const [p, v] of a) if (!b.has(p)) rows.push(h('li', { class: 'del' }, h('code', {}, `- ${p} `), v));
  return rows.length ? h('ul', { class: 'diff', testid: 'state-diff' }, rows.slice(0, 200), rows.length > 200 ? h('li', {}, `… ${rows.length - 200} more`) : null)
    : h('p', { class: 'muted', testid: 'state-diff' }, 'Unchanged.');
}

/** The calls a decision started. */
function callTable(calls) {
  return h('table', { class: 'calls', testid: 'calls' },
    h('thead', {}, h('tr', {}, ['Call', 'Status', 'Deadline', 'Arguments', 'Result', 'Usage', 'Cost'].map((c) => h('th', { scope: 'col' }, c)))),
    h('tbody', {}, calls.map((c) => h('tr', { testid: 'call', data: { callId: String(c.id), kind: String(c.kind ?? '') } },
      h('td', {}, h('code', {}, String(c.kind ?? '')), ' ', String(c.name ?? ''), h('div', { class: 'muted id' }, String(c.id ?? ''))),
      h('td', {}, badge(c.status ?? '—'), c.attempt > 1 ? h('span', { class: 'warn' }, ` try ${c.attempt}`) : null),
      h('td', {}, c.deadline_ms ? when(c.deadline_ms) : '—'),
      h('td', {}, h('code', { testid: 'call-arguments' }, brief(c.arguments ?? '', 300))),
      h('td', {}, c.error ? h('span', { class: 'err' }, brief(c.error, 300)) : h('code', { testid: 'call-result' }, c.result === undefined || c.result === null ? '—' : brief(c.result, 300))),
      h('td', {}, usageText(c.usage)),
      h('td', {}, c.cost != null ? `$${c.cost}` : '—')))));
}

export { pretty };
