// Agents: the tenant's agents, each one's versions (digests, upload
// times), and uploading a component by dropping a `.wasm` file (or
// choosing one) — `PUT /v1/agents/{id}` with `application/wasm`.

import { enc, json, request } from './api.js';
import { fill, h, notice, short, when } from './dom.js';

export function agentsView(main) {
  let stopped = false;
  const list = h('div', { class: 'table-wrap', testid: 'agents' }, notice('Loading…'));
  fill(main, h('h1', {}, 'Agents'), uploader(() => load()), list);

  async function load() {
    try {
      const agents = await json('/v1/agents');
      if (stopped) return;
      if (!agents.length) {
        fill(list, notice('No agents yet: drop a .wasm above.'));
        return;
      }
      fill(list, h('table', {},
        h('caption', { class: 'sr-only' }, 'Agents'),
        h('thead', {}, h('tr', {}, ['Agent', 'Kind', 'Current version', 'Size', 'Versions', 'Updated'].map((c) => h('th', { scope: 'col' }, c)))),
        h('tbody', {}, agents.map((a) => {
          const versions = Array.isArray(a.versions) ? a.versions : [];
          const current = versions[versions.length - 1];
          return h('tr', { testid: 'agent-row', data: { agentId: String(a.agent_id) } },
            h('td', {}, h('a', { href: `#/agents/${enc(String(a.agent_id))}`, testid: 'agent-link' }, String(a.agent_id))),
            h('td', {}, String(a.kind ?? '')),
            h('td', { title: String(a.version ?? '') }, h('code', {}, short(a.version))),
            h('td', { class: 'num' }, a.bytes != null ? `${Math.round(a.bytes / 1024)} KiB` : (a.url ? String(a.url) : '—')),
            h('td', { class: 'num' }, String(versions.length)),
            h('td', {}, current ? when(current.created_ms) : '—'));
        }))));
    } catch (e) {
      if (!stopped) fill(list, notice(`Cannot list agents: ${e.message}`, 'error'));
    }
  }
  load();
  return () => { stopped = true; };
}

export function agentView(main, id) {
  let stopped = false;
  const body = h('div', { testid: 'agent' }, notice('Loading…'));
  fill(main, h('p', {}, h('a', { href: '#/agents' }, '← Agents')), h('h1', {}, 'Agent ', h('code', {}, id)), body, uploader(() => load(), id));

  async function load() {
    try {
      const a = await json(`/v1/agents/${enc(id)}`);
      if (stopped) return;
      const versions = Array.isArray(a.versions) ? a.versions : [];
      fill(body,
        h('dl', { class: 'facts' },
          h('dt', {}, 'Kind'), h('dd', {}, String(a.kind ?? '')),
          a.url ? [h('dt', {}, 'URL'), h('dd', {}, String(a.url)), h('dt', {}, 'Signed'), h('dd', {}, a.signed ? 'yes' : 'no')] : null,
          a.bytes != null ? [h('dt', {}, 'Size'), h('dd', {}, `${a.bytes} bytes`)] : null),
        h('h2', {}, 'Versions'),
        h('p', { class: 'muted' }, 'Newest first. Each decision on a session page names the version it ran.'),
        h('table', { testid: 'versions' },
          h('thead', {}, h('tr', {}, ['Version (digest)', 'Kind', 'Uploaded', 'Decisions', ''].map((c) => h('th', { scope: 'col' }, c)))),
          h('tbody', {}, versions.slice().reverse().map((v) => h('tr', { testid: 'version-row' },
            h('td', {}, h('code', { testid: 'version-digest' }, String(v.version))),
            h('td', {}, String(v.kind ?? '')),
            h('td', {}, when(v.created_ms)),
            h('td', { class: 'num' }, v.decisions != null ? String(v.decisions) : ''),
            // Not always the newest: a version may be stored inactive, or an earlier one activated.
            h('td', {}, v.active ? 'current' : ''))))),
        h('p', {}, h('a', { href: `#/sessions?agent=${enc(id)}` }, 'Sessions of this agent')));
    } catch (e) {
      if (!stopped) fill(body, notice(e.status === 404 ? `No agent ${id}.` : `Cannot read the agent: ${e.message}`, 'error'));
    }
  }
  load();
  return () => { stopped = true; };
}

/** The upload form: an agent id, and a .wasm dropped or chosen. */
function uploader(done, fixedId) {
  const idInput = h('input', { id: 'up-id', testid: 'upload-agent-id', value: fixedId || '', required: true, pattern: '[A-Za-z0-9_\\-.:]{1,128}', spellcheck: 'false' });
  const file = h('input', { id: 'up-file', type: 'file', accept: '.wasm,application/wasm', testid: 'upload-file' });
  const state = h('p', { class: 'muted', role: 'status', testid: 'upload-state' });
  const zone = h('div', { class: 'drop', testid: 'upload-drop', tabindex: '0', role: 'button', 'aria-label': 'Drop a .wasm file here, or press Enter to choose one' },
    'Drop a .wasm here, or choose one');
  let chosen = null;
  const pick = (f) => {
    chosen = f || null;
    if (chosen && !idInput.value) idInput.value = chosen.name.replace(/\.wasm$/, '').replace(/[^A-Za-z0-9_\-.:]/g, '-').replace(/^\./, '_');
    state.textContent = chosen ? `${chosen.name}, ${chosen.size} bytes` : '';
  };
  zone.addEventListener('click', () => file.click());
  zone.addEventListener('keydown', (e) => { if (e.key === 'Enter' || e.key === ' ') { e.preventDefault(); file.click(); } });
  zone.addEventListener('dragover', (e) => { e.preventDefault(); zone.classList.add('over'); });
  zone.addEventListener('dragleave', () => zone.classList.remove('over'));
  zone.addEventListener('drop', (e) => {
    e.preventDefault();
    zone.classList.remove('over');
    pick(e.dataTransfer && e.dataTransfer.files[0]);
  });
  file.addEventListener('change', () => pick(file.files[0]));
  const form = h('form', { class: 'card upload', 'aria-labelledby': 'up-title', onsubmit: async (e) => {
    e.preventDefault();
    if (!chosen) { state.textContent = 'Choose a .wasm first.'; return; }
    const agent = idInput.value.trim();
    state.textContent = `Uploading and compiling ${chosen.name}…`;
    try {
      const response = await request('PUT', `/v1/agents/${enc(agent)}`, { body: await chosen.arrayBuffer(), type: 'application/wasm' });
      const a = await response.json();
      state.textContent = `${response.status === 201 ? 'Uploaded' : 'Unchanged (same bytes)'}: ${a.agent_id} ${a.version}`;
      done();
    } catch (err) {
      state.textContent = `Upload failed: ${err.message}`;
    }
  } },
  h('h2', { id: 'up-title' }, 'Upload a component'),
  zone,
  h('div', { class: 'row' }, h('label', { for: 'up-file' }, 'File'), file),
  h('div', { class: 'row' }, h('label', { for: 'up-id' }, 'Agent id'), idInput,
    h('button', { type: 'submit', testid: 'upload-submit' }, 'Upload')),
  state);
  return form;
}
