// @subs/client: a client of the subs HTTP API for Node 20+ and browsers,
// on `fetch` alone. The types are in index.d.ts; the reference is
// docs/clients.md.

import { ApiError, ConnectionError, errorFrom, StreamError, UnavailableError } from "./errors.js";
import { backoff, Resume, SseReader } from "./stream.js";

export * from "./errors.js";

/** Milliseconds a request may take by default. */
const DEFAULT_TIMEOUT_MS = 30_000;
/** How long a stream may send nothing before the client reconnects (the
 * server sends a comment every 15 seconds). */
const STREAM_IDLE_MS = 60_000;
const DEFAULT_MAX_EVENT_BYTES = 64 * 1024 * 1024;
const DEFAULT_MAX_RECONNECTS = 8;

/**
 * `id` percent-encoded as one path segment: every byte of its UTF-8
 * outside `A-Z a-z 0-9 - . _ ~`, as the server reads ids
 * (encodeURIComponent leaves `!'()*` as they are).
 */
export function segment(id) {
  return encodeURIComponent(id).replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
}

/** A `client.message` input: a user message to `agentId`'s session. */
export function userMessage(agentId, content, options = {}) {
  const input = { type: "client.message", agent_id: agentId, message: { role: "user", content } };
  if (options.turnId !== undefined) input.turn_id = options.turnId;
  return input;
}

function newTurnId() {
  if (globalThis.crypto?.randomUUID) return globalThis.crypto.randomUUID();
  return `turn-${Date.now().toString(36)}-${Math.random().toString(36).slice(2)}`;
}

function sleep(ms, signal) {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener("abort", () => {
      clearTimeout(timer);
      resolve();
    });
  });
}

/** A signal aborted when either of two is (AbortSignal.any, which older
 * runtimes lack). */
function either(a, b) {
  const controller = new AbortController();
  for (const signal of [a, b]) {
    if (signal.aborted) controller.abort(signal.reason);
    else signal.addEventListener("abort", () => controller.abort(signal.reason), { once: true });
  }
  return controller.signal;
}

/** The next page a listing's `Link` header names. */
function nextPage(response) {
  const link = response.headers.get("link");
  const found = link && /<([^>]*)>\s*;\s*rel="?next"?/.exec(link);
  return found ? found[1] : undefined;
}

class Base {
  constructor(baseUrl, key, options) {
    this.baseUrl = String(baseUrl).replace(/\/+$/, "");
    this.fetch = options.fetch ?? globalThis.fetch.bind(globalThis);
    this.timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    this.headers = { ...(options.headers ?? {}) };
    if (key) this.headers.authorization = `Bearer ${key}`;
  }

  url(path, params) {
    let url = this.baseUrl + path;
    if (params) {
      const query = new URLSearchParams();
      for (const [name, value] of Object.entries(params)) {
        if (value !== undefined && value !== null) query.set(name, String(value));
      }
      const text = query.toString();
      if (text) url += `${path.includes("?") ? "&" : "?"}${text}`;
    }
    return url;
  }

  /** Sends a request; the response, or the API's error thrown. */
  async response(method, path, { params, json, body, headers, timeoutMs, signal } = {}) {
    const init = { method, headers: { ...this.headers, ...(headers ?? {}) } };
    if (json !== undefined) {
      init.body = JSON.stringify(json);
      init.headers["content-type"] = "application/json";
    } else if (body !== undefined) {
      init.body = body;
    }
    const timeout = AbortSignal.timeout(timeoutMs ?? this.timeoutMs);
    init.signal = signal ? either(signal, timeout) : timeout;
    let response;
    try {
      response = await this.fetch(this.url(path, params), init);
    } catch (e) {
      if (signal?.aborted) throw e;
      throw new ConnectionError(`${method} ${path}: ${e?.message ?? e}`, { cause: e });
    }
    if (response.status >= 400) throw await errorFrom(response);
    return response;
  }

  async call(method, path, options) {
    const response = await this.response(method, path, options);
    if (response.status === 204) return undefined;
    const text = await response.text();
    return text ? JSON.parse(text) : undefined;
  }
}

/**
 * Events of a session as an async iterable that reconnects by itself: a
 * dropped connection (or a stream the server ended early) is reopened with
 * `Last-Event-ID` set to the last stored event yielded, so every stored
 * event is yielded exactly once, in order.
 */
export class EventStream {
  constructor(client, first, again, resume, signal) {
    this.client = client;
    this.first = first;
    this.again = again;
    this.resume = resume;
    this.controller = new AbortController();
    if (signal) {
      if (signal.aborted) this.controller.abort();
      else signal.addEventListener("abort", () => this.controller.abort(), { once: true });
    }
  }

  /** The turn a turn's stream follows. */
  get turnId() {
    return this.resume.turnId;
  }

  /** The id of the last stored event yielded. */
  get lastEventId() {
    return this.resume.lastId;
  }

  /** Closes the connection; the iteration ends. */
  close() {
    this.controller.abort();
  }

  [Symbol.asyncIterator]() {
    return this.run();
  }

  async *run() {
    const { client, resume } = this;
    const stop = this.controller.signal;
    let request = this.first;
    let failures = 0;
    let lastError;
    while (!stop.aborted) {
      resume.progressed = false;
      const connection = new AbortController();
      const onStop = () => connection.abort();
      stop.addEventListener("abort", onStop, { once: true });
      let idle;
      const touch = () => {
        clearTimeout(idle);
        idle = setTimeout(() => connection.abort(), client.streamIdleMs);
      };
      try {
        touch();
        const init = { method: request.method, headers: { ...client.headers, ...request.headers }, signal: connection.signal };
        if (request.json !== undefined) {
          init.body = JSON.stringify(request.json);
          init.headers["content-type"] = "application/json";
        }
        const response = await client.fetch(client.url(request.path), init);
        if (response.status >= 400) {
          lastError = await errorFrom(response);
          if (!(lastError instanceof UnavailableError)) throw lastError;
        } else if (response.body) {
          const reader = new SseReader(client.maxEventBytes);
          const decoder = new TextDecoder();
          const body = response.body.getReader();
          try {
            for (;;) {
              touch();
              const { done, value } = await body.read();
              if (done) break;
              for (const event of reader.feed(decoder.decode(value, { stream: true }))) {
                if (resume.accept(event)) {
                  yield event;
                  if (resume.done) return;
                }
              }
            }
          } finally {
            body.cancel().catch(() => {});
          }
        }
      } catch (e) {
        // What the API refused, or a stream that cannot be read, is the
        // caller's to see; anything else broke the connection, which is
        // opened again.
        if (e instanceof StreamError || (e instanceof ApiError && !(e instanceof UnavailableError))) throw e;
      } finally {
        clearTimeout(idle);
        stop.removeEventListener("abort", onStop);
        connection.abort();
      }
      if (stop.aborted) return;
      failures = resume.progressed ? 0 : failures + 1;
      if (failures > client.maxReconnects) {
        if (lastError) throw lastError;
        throw new ConnectionError(
          `the stream could not be reconnected after ${client.maxReconnects} tries (last event id ${resume.lastId})`,
        );
      }
      await sleep(backoff(Math.max(failures, 1)), stop);
      request = this.again(resume);
    }
  }
}

function eventsRequest(sessionId, after) {
  const headers = { accept: "text/event-stream" };
  if (after !== undefined) headers["last-event-id"] = String(after);
  return { method: "GET", path: `/v1/sessions/${segment(sessionId)}/events`, headers };
}

/** A client of the subs HTTP API, with a tenant's key or an end-user token. */
export class Client extends Base {
  constructor(baseUrl, options = {}) {
    super(baseUrl, options.key, options);
    this.maxReconnects = options.maxReconnects ?? DEFAULT_MAX_RECONNECTS;
    this.maxEventBytes = options.maxEventBytes ?? DEFAULT_MAX_EVENT_BYTES;
    this.streamIdleMs = Math.max(options.timeoutMs ?? 0, STREAM_IDLE_MS);
  }

  // ---- sessions ----

  send(sessionId, input, options = {}) {
    const json = { ...input };
    if (options.identity !== undefined) json.identity = options.identity;
    const headers = options.traceparent ? { traceparent: options.traceparent } : undefined;
    return this.call("POST", `/v1/sessions/${segment(sessionId)}/input`, { json, headers, signal: options.signal });
  }

  sendMessage(sessionId, agentId, content, options = {}) {
    return this.send(sessionId, userMessage(agentId, content, options), options);
  }

  stream(sessionId, input, options = {}) {
    if (input.type !== "client.message" && input.type !== "client.messages") {
      throw new TypeError("only `client.message` and `client.messages` inputs start a turn that streams");
    }
    // A turn id of the client's: sending the input again (when the stream
    // broke before its first event) is answered with the same turn.
    const turnId = typeof input.turn_id === "string" ? input.turn_id : newTurnId();
    const json = { ...input, turn_id: turnId, stream: true };
    if (options.identity !== undefined) json.identity = options.identity;
    const first = {
      method: "POST",
      path: `/v1/sessions/${segment(sessionId)}/input`,
      headers: { accept: "text/event-stream" },
      json,
    };
    const again = (resume) => (resume.lastId === undefined ? first : eventsRequest(sessionId, resume.lastId));
    return new EventStream(this, first, again, new Resume(undefined, turnId), options.signal);
  }

  streamMessage(sessionId, agentId, content, options = {}) {
    return this.stream(sessionId, userMessage(agentId, content, options), options);
  }

  events(sessionId, options = {}) {
    return new EventStream(
      this,
      eventsRequest(sessionId, options.after),
      (resume) => eventsRequest(sessionId, resume.lastId),
      new Resume(options.after, undefined),
      options.signal,
    );
  }

  getSession(sessionId) {
    return this.call("GET", `/v1/sessions/${segment(sessionId)}`);
  }

  async *listSessions(filters = {}) {
    const { limit, after, identity, status, agent } = filters;
    let path = "/v1/sessions";
    let params = { limit, after, identity, status, agent };
    while (path) {
      const response = await this.response("GET", path, { params });
      yield* await response.json();
      path = nextPage(response);
      params = undefined;
    }
  }

  async *decisions(sessionId, options = {}) {
    let path = `/v1/sessions/${segment(sessionId)}/decisions`;
    let params = { limit: options.limit, after: options.after };
    while (path) {
      const response = await this.response("GET", path, { params });
      yield* await response.json();
      path = nextPage(response);
      params = undefined;
    }
  }

  async cancel(sessionId) {
    const answer = await this.call("POST", `/v1/sessions/${segment(sessionId)}/cancel`);
    return answer.cancelled;
  }

  setBudget(sessionId, budget) {
    return this.call("PUT", `/v1/sessions/${segment(sessionId)}/budget`, { json: { budget } });
  }

  usage() {
    return this.call("GET", "/v1/usage");
  }

  // ---- interrupts and client tools ----

  async interrupts(sessionId) {
    return (await this.getSession(sessionId)).interrupts;
  }

  resume(sessionId, interruptId, ...payload) {
    const input = { type: "interrupt.resume", interrupt_id: interruptId };
    if (payload.length > 0) input.payload = payload[0];
    return this.send(sessionId, input);
  }

  toolResult(sessionId, callId, result, options = {}) {
    const input = { type: "tool.result", id: callId, result };
    if (options.attempt !== undefined) input.attempt = options.attempt;
    return this.send(sessionId, input);
  }

  toolError(sessionId, callId, error, options = {}) {
    const input = { type: "tool.error", id: callId, error, retryable: options.retryable ?? false };
    if (options.attempt !== undefined) input.attempt = options.attempt;
    return this.send(sessionId, input);
  }

  // ---- agents ----

  uploadAgent(agentId, wasm, options = {}) {
    return this.call("PUT", `/v1/agents/${segment(agentId)}`, {
      params: options.activate === false ? { activate: "false" } : undefined,
      body: wasm,
      headers: { "content-type": "application/wasm" },
      // A component is checked and compiled before it is answered.
      timeoutMs: Math.max(this.timeoutMs, 300_000),
    });
  }

  registerWorker(agentId, url, options = {}) {
    const json = { url };
    if (options.secret !== undefined) json.secret = options.secret;
    return this.call("PUT", `/v1/agents/${segment(agentId)}`, {
      params: options.activate === false ? { activate: "false" } : undefined,
      json,
    });
  }

  getAgent(agentId) {
    return this.call("GET", `/v1/agents/${segment(agentId)}`);
  }

  listAgents() {
    return this.call("GET", "/v1/agents");
  }

  async deleteAgent(agentId) {
    await this.call("DELETE", `/v1/agents/${segment(agentId)}`);
  }

  async agentVersions(agentId) {
    return (await this.getAgent(agentId)).versions;
  }

  activate(agentId, version) {
    return this.call("PUT", `/v1/agents/${segment(agentId)}/current`, { json: { version } });
  }

  deleteVersion(agentId, version) {
    return this.call("DELETE", `/v1/agents/${segment(agentId)}/versions/${segment(version)}`);
  }

  replay(agentId, version, options = {}) {
    const json = { version };
    const names = { sessions: "sessions", maxSessions: "max_sessions", since: "since", limit: "limit", timeoutSecs: "timeout_secs" };
    for (const [option, field] of Object.entries(names)) {
      if (options[option] !== undefined) json[field] = options[option];
    }
    // The replay runs within its own timeout (60 s unless set).
    const timeoutMs = ((options.timeoutSecs ?? 60) + 30) * 1000;
    return this.call("POST", `/v1/agents/${segment(agentId)}/replay`, { json, timeoutMs });
  }

  // ---- tokens ----

  streamToken() {
    return this.call("POST", "/v1/tokens");
  }

  endUserToken(identity, options = {}) {
    const who = typeof identity === "string" ? { id: identity } : { ...identity };
    if (options.metadata !== undefined) who.metadata = options.metadata;
    const json = { identity: who };
    if (options.sessionId !== undefined) json.session_id = options.sessionId;
    if (options.ttlSecs !== undefined) json.ttl_secs = options.ttlSecs;
    return this.call("POST", "/v1/tokens", { json });
  }

  // ---- operations ----

  healthz() {
    return this.call("GET", "/healthz");
  }
}

/** A client of the admin API (`/v1/admin`), with the operator key. */
export class AdminClient extends Base {
  constructor(baseUrl, options) {
    super(baseUrl, options.key, options);
  }

  listTenants() {
    return this.call("GET", "/v1/admin/tenants");
  }

  getTenant(tenant) {
    return this.call("GET", `/v1/admin/tenants/${segment(tenant)}`);
  }

  putTenant(tenant, options = {}) {
    const json = options.limits === undefined ? undefined : { limits: options.limits };
    return this.call("PUT", `/v1/admin/tenants/${segment(tenant)}`, { json });
  }

  deleteTenant(tenant) {
    return this.call("DELETE", `/v1/admin/tenants/${segment(tenant)}`);
  }

  getLimits(tenant) {
    return this.call("GET", `/v1/admin/tenants/${segment(tenant)}/limits`);
  }

  setLimits(tenant, limits) {
    return this.call("PUT", `/v1/admin/tenants/${segment(tenant)}/limits`, { json: limits });
  }

  listKeys(tenant) {
    return this.call("GET", "/v1/admin/keys", { params: { tenant } });
  }

  createKey(tenant, options = {}) {
    const json = { tenant };
    if (options.name !== undefined) json.name = options.name;
    return this.call("POST", "/v1/admin/keys", { json });
  }

  revokeKey(key) {
    return this.call("DELETE", `/v1/admin/keys/${segment(key)}`);
  }
}
