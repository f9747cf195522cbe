// Building the page: elements from data, never from markup. Every string
// that came from the API goes into the page as text (textContent or an
// attribute value), so nothing it holds can run or restyle the page.

/**
 * Makes an element: `h('a', {href: '#/x', testid: 'link'}, 'text', child)`.
 * Attributes: `class`, `testid` (data-testid), `on<event>` (listeners),
 * `data` (an object of data-* attributes), `hidden`/`disabled`/… (booleans),
 * anything else with setAttribute. Children: strings (as text), nodes,
 * arrays, null/undefined/false (skipped).
 */
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === 'class') el.className = value;
    else if (key === 'testid') el.dataset.testid = value;
    else if (key === 'data') Object.assign(el.dataset, value);
    else if (key.startsWith('on') && typeof value === 'function') el.addEventListener(key.slice(2), value);
    else if (value === true) el.setAttribute(key, '');
    else el.setAttribute(key, String(value));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children) {
    if (child === undefined || child === null || child === false) continue;
    if (Array.isArray(child)) append(el, child);
    else if (child instanceof Node) el.append(child);
    else el.append(document.createTextNode(String(child)));
  }
}

/** Replaces the children of `el`. */
export function fill(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

/** JSON for people: indented, `null` for undefined. */
export function pretty(value) {
  try {
    return JSON.stringify(value === undefined ? null : value, null, 2);
  } catch {
    return String(value);
  }
}

/** A one-line JSON text, cut to `max` characters. */
export function brief(value, max = 160) {
  let text = typeof value === 'string' ? value : JSON.stringify(value ?? null);
  if (text === undefined) text = String(value);
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}

/** The raw JSON of an item, one click away. */
export function raw(value, label = 'Raw JSON') {
  const details = h('details', { class: 'raw', testid: 'raw' }, h('summary', {}, label));
  // Built when first opened: a page of hundreds of items stays cheap.
  details.addEventListener('toggle', () => {
    if (details.open && details.childElementCount === 1) details.append(h('pre', {}, pretty(value)));
  });
  return details;
}

/** A time for people (local), from Unix milliseconds. */
export function when(ms) {
  if (typeof ms !== 'number' || !Number.isFinite(ms)) return '—';
  const d = new Date(ms);
  return d.toLocaleString(undefined, { dateStyle: 'short', timeStyle: 'medium' });
}

/** How long ago, roughly. */
export function ago(ms) {
  if (typeof ms !== 'number') return '';
  const s = Math.round((Date.now() - ms) / 1000);
  if (s < 60) return `${Math.max(s, 0)} s ago`;
  if (s < 3600) return `${Math.round(s / 60)} min ago`;
  if (s < 86400) return `${Math.round(s / 3600)} h ago`;
  return `${Math.round(s / 86400)} d ago`;
}

/** A duration in ms for people. */
export function ms(value) {
  if (typeof value !== 'number' || !Number.isFinite(value)) return '—';
  // Components decide in microseconds: small latencies keep their
  // fraction.
  if (value < 10) return `${value.toFixed(value < 0.1 ? 3 : 2)} ms`;
  return value < 1000 ? `${Math.round(value)} ms` : `${(value / 1000).toFixed(2)} s`;
}

/** A digest shortened for tables (`sha256:0123abcd…`). */
export function short(digest) {
  if (typeof digest !== 'string') return '—';
  const [algo, hex] = digest.includes(':') ? digest.split(':', 2) : ['', digest];
  return `${algo ? `${algo}:` : ''}${hex.slice(0, 12)}`;
}

/** The text of a message's content: a string, or its text parts. */
export function textOf(content) {
  if (typeof content === 'string') return content;
  if (Array.isArray(content)) {
    return content.map((p) => (p && p.type === 'text' ? p.text : p && p.type ? `[${p.type}]` : '')).join('');
  }
  return content == null ? '' : JSON.stringify(content);
}

/** A status badge. */
export function badge(status, testid) {
  return h('span', { class: `badge s-${String(status).replace(/[^a-z_]/gi, '')}`, testid }, String(status ?? '—'));
}

/** A message shown in place of a view: errors, empty states. */
export function notice(text, kind = 'info') {
  return h('p', { class: `notice ${kind}`, role: kind === 'error' ? 'alert' : 'status', testid: `notice-${kind}` }, text);
}

/** Usage as people read it: `123 in + 45 out`. */
export function usageText(usage) {
  if (!usage || typeof usage !== 'object') return '—';
  const input = usage.prompt_tokens ?? usage.input_tokens;
  const output = usage.completion_tokens ?? usage.output_tokens;
  if (input === undefined && output === undefined) return Object.keys(usage).length ? brief(usage, 60) : '—';
  return `${input ?? 0} in + ${output ?? 0} out`;
}
