// The API, as the page uses it: the user's key or end-user token, kept in
// this tab's session storage and sent as `Authorization: Bearer`; asked
// for once when the server answers 401.

const STORAGE = 'subs.credential';

/** An API error: the status and the API's `{error, code, field}`. */
export class ApiError extends Error {
  constructor(status, body) {
    super(body && body.error ? body.error : `HTTP ${status}`);
    this.status = status;
    this.code = body && body.code;
    this.field = body && body.field;
  }
}

/** The credential in use, or null. */
export function credential() {
  return sessionStorage.getItem(STORAGE);
}

/** Forgets the credential: the next 401 asks again. */
export function forget() {
  sessionStorage.removeItem(STORAGE);
  listeners.forEach((f) => f());
}

const listeners = [];
/** Calls `f` whenever the credential changes. */
export function onCredential(f) {
  listeners.push(f);
}

/** What the credential is, for the header: an end-user token or a key. */
export function describeCredential() {
  const c = credential();
  if (!c) return 'no key';
  if (c.startsWith('subs_user_')) return 'end-user token';
  return `key ${c.slice(0, 12)}…`;
}

// One question at a time: requests that meet a 401 together wait for the
// same answer.
let asking = null;

/** Asks the user for a key; resolves to it, or null when cancelled. */
export function askForKey(why) {
  if (asking) return asking;
  const dialog = document.getElementById('auth');
  const form = document.getElementById('auth-form');
  const input = document.getElementById('auth-key');
  if (why) document.getElementById('auth-why').textContent = why;
  input.value = '';
  asking = new Promise((resolve) => {
    const done = () => {
      dialog.removeEventListener('close', done);
      asking = null;
      const key = dialog.returnValue === 'ok' ? input.value.trim() : '';
      if (key) {
        sessionStorage.setItem(STORAGE, key);
        listeners.forEach((f) => f());
      }
      resolve(key || null);
    };
    dialog.addEventListener('close', done);
  });
  // Closed by script rather than by `method="dialog"`, so the page's
  // `form-action 'none'` policy has no say in it.
  form.onsubmit = (e) => {
    e.preventDefault();
    dialog.close(e.submitter && e.submitter.value === 'cancel' ? 'cancel' : 'ok');
  };
  form.reset();
  dialog.returnValue = '';
  dialog.showModal();
  input.focus();
  return asking;
}

/**
 * Calls the API: `request('GET', '/v1/sessions')`. `options.body` is sent
 * as JSON unless `options.type` names another media type (then as is).
 * Answers the fetch Response (ok), or throws ApiError. A 401 asks for a
 * key once and tries again with it.
 */
export async function request(method, path, options = {}) {
  for (let attempt = 0; ; attempt++) {
    const headers = { ...(options.headers || {}) };
    const key = credential();
    if (key) headers.Authorization = `Bearer ${key}`;
    let body;
    if (options.body !== undefined) {
      if (options.type) {
        headers['Content-Type'] = options.type;
        body = options.body;
      } else {
        headers['Content-Type'] = 'application/json';
        body = JSON.stringify(options.body);
      }
    }
    const response = await fetch(path, { method, headers, body, signal: options.signal });
    if (response.ok) return response;
    const error = new ApiError(response.status, await response.json().catch(() => null));
    if (response.status === 401 && attempt === 0 && !options.noAsk) {
      const why = key
        ? `The server refused the key in use (${error.message}). Give another API key or end-user token.`
        : 'The server asks for an API key or an end-user token. It is kept in this tab only (session storage) and sent as Authorization: Bearer.';
      if (await askForKey(why)) continue;
    }
    throw error;
  }
}

/** GET as JSON. */
export async function json(path, options) {
  const response = await request('GET', path, options);
  return response.json();
}

/** GET as JSON with the `rel="next"` URL of its Link header, if any. */
export async function page(path, options) {
  const response = await request('GET', path, options);
  return { items: await response.json(), next: nextLink(response.headers.get('link')) };
}

/** The `rel="next"` target of a Link header. */
export function nextLink(header) {
  if (!header) return null;
  for (const part of header.split(',')) {
    const m = part.match(/<([^>]*)>\s*;\s*rel="?next"?/);
    if (m) return m[1];
  }
  return null;
}

/** POST JSON. */
export async function post(path, body) {
  const response = await request('POST', path, { body });
  return response.json().catch(() => null);
}

/** A session id as one URL segment (every byte but A-Z a-z 0-9 - . _ ~ escaped). */
export function enc(id) {
  return encodeURIComponent(id).replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
}

/**
 * Follows a session's events: `follow(id, {onEvent, onState})` returns a
 * function that stops. `EventSource` cannot send headers, so it
 * authenticates with `?token=`: an end-user token is sent as itself; with
 * a key, a five-minute event-stream token from `POST /v1/tokens`, minted
 * again whenever the stream has to be opened anew. `EventSource`
 * reconnects by itself with `Last-Event-ID` while its token is good; when
 * the server refuses it (an expired token), the stream is opened again
 * here with a fresh token and `?after=` the last event seen, so no stored
 * event is missed or seen twice.
 */
export function follow(sessionId, { onEvent, onState }) {
  let source = null;
  let stopped = false;
  let last = null;
  let retry = null;
  const names = ['turn.started', 'message', 'llm.token.delta', 'tool.call', 'interrupt', 'interrupt.resumed', 'turn.done', 'turn.failed', 'state'];
  const open = async () => {
    if (stopped) return;
    let url = `/v1/sessions/${enc(sessionId)}/events`;
    const params = [];
    if (last !== null) params.push(`after=${last}`);
    try {
      const token = await streamToken();
      if (token) params.push(`token=${/^[A-Za-z0-9_.:-]+$/.test(token) ? token : encodeURIComponent(token)}`);
    } catch (e) {
      onState && onState(`cannot follow: ${e.message}`);
      retry = setTimeout(open, 5000);
      return;
    }
    if (stopped) return;
    if (params.length) url += `?${params.join('&')}`;
    source = new EventSource(url);
    source.onopen = () => onState && onState('live');
    source.onerror = () => {
      if (stopped) return;
      if (source.readyState === EventSource.CLOSED) {
        onState && onState('reconnecting');
        source.close();
        retry = setTimeout(open, 1000);
      } else {
        onState && onState('reconnecting');
      }
    };
    for (const name of names) {
      source.addEventListener(name, (e) => {
        if (e.lastEventId !== '' && e.lastEventId !== undefined && name !== 'llm.token.delta') {
          const id = Number(e.lastEventId);
          if (Number.isFinite(id)) last = id;
        }
        let data = null;
        try {
          data = JSON.parse(e.data);
        } catch {
          data = e.data;
        }
        onEvent(name, data, name === 'llm.token.delta' ? null : last);
      });
    }
  };
  open();
  return () => {
    stopped = true;
    clearTimeout(retry);
    if (source) source.close();
  };
}

/** The `?token=` of an event stream, or null when none is needed. */
async function streamToken() {
  const key = credential();
  if (key && key.startsWith('subs_user_')) return key;
  const response = await request('POST', '/v1/tokens');
  const body = await response.json();
  return body.token;
}
