// The sessions: one page of `GET /v1/sessions` at a time (the API pages
// by id; `Link: rel="next"` names the next page), filtered by status,
// agent and owner identity, refreshed every few seconds while shown.
// Only the page on screen is ever rendered, so a tenant with 10,000
// sessions costs what one with 50 does.

import { enc, json, page } from './api.js';
import { ago, badge, fill, h, notice, usageText, when } from './dom.js';

const REFRESH_MS = 3000;
const LIMIT = 50;

export function sessionsView(main, query) {
  const filters = {
    status: query.get('status') || '',
    agent: query.get('agent') || '',
    identity: query.get('identity') || '',
  };
  // The pages seen so far, to go back: each entry is an `after` (null:
  // the first page).
  const trail = [null];
  let next = null;
  let timer = null;
  let stopped = false;

  const status = h(
    'select',
    { id: 'f-status', testid: 'filter-status' },
    ['', 'idle', 'running', 'waiting'].map((s) => h('option', { value: s, selected: s === filters.status }, s || 'any')),
  );
  const agent = h('input', { id: 'f-agent', testid: 'filter-agent', value: filters.agent, list: 'agent-ids', spellcheck: 'false' });
  const agentIds = h('datalist', { id: 'agent-ids' });
  const identity = h('input', { id: 'f-identity', testid: 'filter-identity', value: filters.identity, spellcheck: 'false' });
  const form = h(
    'form',
    { class: 'filters', role: 'search', 'aria-label': 'Filter sessions', onsubmit: (e) => { e.preventDefault(); apply(); } },
    h('label', { for: 'f-status' }, 'Status'), status,
    h('label', { for: 'f-agent' }, 'Agent'), agent, agentIds,
    h('label', { for: 'f-identity' }, 'Owner identity'), identity,
    h('button', { type: 'submit', testid: 'filter-apply' }, 'Filter'),
  );
  const table = h('div', { class: 'table-wrap', testid: 'sessions' });
  const prev = h('button', { type: 'button', testid: 'page-prev', onclick: () => go(-1) }, '← Previous');
  const more = h('button', { type: 'button', testid: 'page-next', onclick: () => go(1) }, 'Next →');
  const where = h('span', { class: 'muted', testid: 'page-number' });
  const state = h('span', { class: 'muted', testid: 'sessions-state', 'aria-live': 'polite' });
  fill(main, h('h1', {}, 'Sessions'), form, h('div', { class: 'pager' }, prev, where, more, state), table);
  status.addEventListener('change', apply);

  json('/v1/agents', { noAsk: true })
    .then((agents) => fill(agentIds, agents.map((a) => h('option', { value: a.agent_id }))))
    .catch(() => {});

  function apply() {
    const q = new URLSearchParams();
    if (status.value) q.set('status', status.value);
    if (agent.value.trim()) q.set('agent', agent.value.trim());
    if (identity.value.trim()) q.set('identity', identity.value.trim());
    const hash = `#/sessions${q.toString() ? `?${q}` : ''}`;
    if (location.hash !== hash) location.hash = hash;
  }

  function url(after) {
    const q = [`limit=${LIMIT}`];
    if (after !== null) q.push(`after=${enc(after)}`);
    for (const [k, v] of Object.entries(filters)) if (v) q.push(`${k}=${enc(v)}`);
    return `/v1/sessions?${q.join('&')}`;
  }

  async function load() {
    clearTimeout(timer);
    const after = trail[trail.length - 1];
    try {
      const { items, next: link } = await page(url(after));
      if (stopped) return;
      next = link ? new URLSearchParams(link.split('?')[1] || '').get('after') : null;
      render(Array.isArray(items) ? items : []);
      state.textContent = `updated ${new Date().toLocaleTimeString()}`;
    } catch (e) {
      if (stopped) return;
      fill(table, notice(`Cannot list sessions: ${e.message}`, 'error'));
    }
    if (!stopped) timer = setTimeout(() => (document.hidden ? (timer = setTimeout(load, REFRESH_MS)) : load()), REFRESH_MS);
  }

  function go(step) {
    if (step > 0 && next !== null) trail.push(next);
    else if (step < 0 && trail.length > 1) trail.pop();
    else return;
    load();
  }

  function render(items) {
    prev.disabled = trail.length <= 1;
    more.disabled = next === null;
    where.textContent = `page ${trail.length}`;
    if (!items.length) {
      fill(table, notice(trail.length > 1 || next ? 'No sessions on this page (filtered ones may be on the next).' : 'No sessions.'));
      return;
    }
    // Tokens, cost and turns are shown when the API gives them.
    const has = (field) => items.some((s) => s[field] !== undefined && s[field] !== null);
    const cols = { usage: has('usage'), cost: has('cost'), turns: has('turns') };
    const head = h(
      'tr', {},
      h('th', { scope: 'col' }, 'Session'), h('th', { scope: 'col' }, 'Status'), h('th', { scope: 'col' }, 'Agent'),
      h('th', { scope: 'col' }, 'Owner'),
      cols.turns && h('th', { scope: 'col' }, 'Turns'), cols.usage && h('th', { scope: 'col' }, 'Tokens'),
      cols.cost && h('th', { scope: 'col' }, 'Cost'),
      h('th', { scope: 'col' }, 'Created'), h('th', { scope: 'col' }, 'Last activity'),
    );
    const rows = items.map((s) => h(
      'tr', { testid: 'session-row', data: { sessionId: String(s.session_id) } },
      h('td', {}, h('a', { href: `#/sessions/${enc(String(s.session_id))}`, testid: 'session-link' }, String(s.session_id)),
        s.ancestry && s.ancestry.length ? h('span', { class: 'muted' }, ` (child of ${s.ancestry[s.ancestry.length - 1]})`) : null),
      h('td', {}, badge(s.status, 'session-status')),
      h('td', {}, h('a', { href: `#/agents/${enc(String(s.agent_id))}` }, String(s.agent_id)), s.agent_version ? h('span', { class: 'muted' }, ` ${s.agent_version}`) : null),
      h('td', {}, s.identity && s.identity.id ? String(s.identity.id) : '—'),
      cols.turns && h('td', { class: 'num' }, s.turns ?? '—'),
      cols.usage && h('td', { class: 'num' }, usageText(s.usage)),
      cols.cost && h('td', { class: 'num' }, s.cost != null ? `$${s.cost}` : '—'),
      h('td', {}, when(s.created_ms)),
      h('td', { title: when(s.updated_ms) }, ago(s.updated_ms)),
    ));
    fill(table, h('table', {}, h('caption', { class: 'sr-only' }, 'Sessions'), h('thead', {}, head), h('tbody', {}, rows)));
  }

  load();
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}
