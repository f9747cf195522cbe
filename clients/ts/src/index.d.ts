// The types of @subs/client (index.js). The protocol's types (ClientInput,
// Message, AgentConfig, Call, WorkerIdentity, …) are generated from the
// protocol's schema into protocol.generated.d.ts by `cargo xtask codegen`
// and re-exported here; the server's own answers are declared below, as
// docs/api.md describes them.

import type {
  Call,
  ClientInput,
  ClientMessageInput,
  ClientMessagesInput,
  Content,
  Json,
  Message,
  MessageTree,
  StreamEvent,
  WorkerIdentity,
} from './protocol.generated.js';

export type * from './protocol.generated.js';
export * from './errors.js';

/** Where a session is: `waiting` is for an interrupt or a client tool. */
export type SessionStatus = 'idle' | 'running' | 'waiting';

/** What `POST /v1/sessions/{id}/input` answers (202). */
export interface InputAccepted {
  session_id: string;
  /** The turn the input started, joined or queued; absent for settling inputs. */
  turn_id?: string;
  /** True when the `turn_id` was already known: nothing new was done. */
  existing: boolean;
}

/** An interrupt waiting for `interrupt.resume`. */
export interface OpenInterrupt {
  interrupt_id: string;
  reason: string;
  payload?: Json;
  /** The JSON Schema a resume's payload must satisfy, when the agent gave one. */
  resume_schema?: Json;
}

/** A session's snapshot. */
export interface SessionView {
  session_id: string;
  agent_id: string;
  status: SessionStatus;
  turn_id: string | null;
  agent: { [key: string]: Json } | null;
  /** The agent's state (`null` when it never set one). */
  state: Json;
  messages: Message[];
  message_tree: MessageTree;
  calls: Call[];
  interrupts: OpenInterrupt[];
  usage: { [key: string]: Json };
  /** Dollars, a decimal string; `null` when no call had a known price. */
  cost: string | null;
  budget: string | null;
  ancestry: string[];
  identity: WorkerIdentity;
  agent_version?: string;
  /** The latest stored event's id: `events({after})` resumes from it. */
  last_event_id?: number;
}

/** A session as the listing shows it. */
export interface SessionSummary {
  session_id: string;
  agent_id: string;
  status: SessionStatus;
  ancestry: string[];
  identity: WorkerIdentity;
  created_ms: number;
  updated_ms: number;
  turns: number;
  usage: { [key: string]: Json };
  cost: string | null;
}

/** One decision of a session: the trigger the agent was asked about and what became of it. */
export interface DecisionStep {
  /** The step's number in the session: 0, 1, 2… */
  seq: number;
  decision_id: string;
  turn_id: string | null;
  /** The trigger, tagged by `type`, as the agent received it. */
  trigger: { [key: string]: Json };
  /** `pending`, `applied`, `failed` or `dropped`. */
  status: string;
  attempts: number;
  error: string | null;
  /** The `DecisionResponse`, once applied. */
  decision: { [key: string]: Json } | null;
  /** Ids of the messages the decision recorded. */
  recorded: string[];
  agent_version: string | null;
  requested_ms: number | null;
  decided_ms: number | null;
  latency_ms: number | null;
  /** The calls the decision started, in order. */
  calls: { [key: string]: Json }[];
}

/** A session's budget and cost, in dollars. */
export interface SessionBudget {
  session_id: string;
  budget: string | null;
  cost: string | null;
}

/** What the tenant's sessions cost, and its budget. */
export interface Usage {
  cost: string | null;
  budget: string | null;
}

/** One stored version of an agent. */
export interface AgentVersion {
  version: string;
  kind: string;
  created_ms: number;
  bytes?: number;
  active: boolean;
  /** Decisions it made (only from `getAgent`). */
  decisions?: number;
}

/** An agent: its current version, and every stored one. */
export interface Agent {
  agent_id: string;
  version: string;
  kind: string;
  url?: string;
  signed?: boolean;
  bytes?: number;
  versions: AgentVersion[];
}

/** What `replay` found. */
export interface ReplayReport {
  agent_id: string;
  version: string;
  decisions: number;
  same: number;
  different: number;
  failed: number;
  skipped: number;
  http_refused: number;
  sessions: number;
  elapsed_ms: number;
  stopped?: string;
  differences: { [key: string]: Json }[];
  failures: { [key: string]: Json }[];
}

/** A token from `POST /v1/tokens` (`expires_at` in Unix seconds). */
export interface Token {
  token: string;
  expires_at: number;
  identity?: WorkerIdentity;
  session_id?: string;
}

/** A tenant, as the admin API shows it. */
export interface Tenant {
  tenant: string;
  stored: boolean;
  configured: boolean;
  keys: number;
  limits: { [key: string]: Json };
  overrides: { [key: string]: Json };
  created_ms: number | null;
  updated_ms: number | null;
}

/** A tenant's limits: in effect, set by the operator, and spent. */
export interface TenantLimits {
  tenant: string;
  limits: { [key: string]: Json };
  overrides: { [key: string]: Json };
  spent: string;
}

/** What deleting a tenant did. */
export interface TenantDeleted {
  tenant: string;
  deleted: boolean;
  revoked_keys: number;
  cancelled_turns: number;
}

/** A key as listed: never the key, its hash and prefix. */
export interface KeyInfo {
  tenant: string;
  hash: string;
  prefix: string;
  name?: string | null;
  created_ms: number;
  source: 'store' | 'config';
}

/** A key just made: `key` is in this answer only. */
export interface NewKey {
  key: string;
  tenant: string;
  hash: string;
  prefix: string;
  name?: string | null;
  created_ms: number;
}

/** A key revoked. */
export interface RevokedKey {
  tenant: string;
  hash: string;
  prefix: string;
  revoked: boolean;
}

/**
 * One frame of a session's event stream, as an {@link EventStream} yields
 * it: the `{event, data}` pair of the protocol's `StreamEvent` (a session
 * event, or the live-only `tool.progress`), and `id`, its sequence number
 * in the session (absent for the live-only `llm.token.delta` and
 * `tool.progress`). Comparing `event` with a name narrows `data` to that
 * event's type (`if (frame.event === 'tool.progress') frame.data.progress`).
 */
export type StreamEventFrame = StreamEvent & { id?: number };

/** Options every client takes. */
export interface ClientOptions {
  /** A tenant's key, an end-user token, or (AdminClient) the operator key. */
  key?: string;
  /** Milliseconds a request may take (default 30,000). */
  timeoutMs?: number;
  /** Headers added to every request. */
  headers?: Record<string, string>;
  /** The `fetch` to use (default: the global one). */
  fetch?: typeof globalThis.fetch;
}

/** Options of the tenant's client. */
export interface SubsClientOptions extends ClientOptions {
  /** Reconnects in a row without an event before a stream gives up (default 8). */
  maxReconnects?: number;
  /** The largest event a stream may send, counted in characters of its text (default 64 Mi). */
  maxEventBytes?: number;
}

/**
 * Events of a session as an async iterable that reconnects by itself, with
 * `Last-Event-ID` set to the last stored event yielded: every stored event
 * is yielded exactly once, in order. A turn's stream ends after the turn's
 * `turn.done` or `turn.failed`; a session's goes on until `close()` (or
 * `break`, or the `signal` given).
 */
export declare class EventStream implements AsyncIterable<StreamEventFrame> {
  /** The turn a turn's stream follows. */
  readonly turnId: string | undefined;
  /** The id of the last stored event yielded. */
  readonly lastEventId: number | undefined;
  /** Closes the connection; the iteration ends. */
  close(): void;
  [Symbol.asyncIterator](): AsyncIterator<StreamEventFrame>;
}

/** A streamable input: the ones that start a turn. */
export type TurnInput = ClientMessageInput | ClientMessagesInput;

/** A client of the subs HTTP API, with a tenant's key or an end-user token. */
export declare class Client {
  constructor(baseUrl: string, options?: SubsClientOptions);

  /** Sends any input; `client.message(s)` and `client.action` create the session on first use. */
  send(
    sessionId: string,
    input: ClientInput,
    options?: { identity?: WorkerIdentity; traceparent?: string; signal?: AbortSignal },
  ): Promise<InputAccepted>;
  /** Sends a user message (creating the session for `agentId` on first use). */
  sendMessage(
    sessionId: string,
    agentId: string,
    content: Content,
    options?: { turnId?: string; identity?: WorkerIdentity },
  ): Promise<InputAccepted>;
  /** Sends the input and streams the turn it starts, resuming by itself. */
  stream(sessionId: string, input: TurnInput, options?: { identity?: WorkerIdentity; signal?: AbortSignal }): EventStream;
  /** `stream` of a user message. */
  streamMessage(
    sessionId: string,
    agentId: string,
    content: Content,
    options?: { turnId?: string; identity?: WorkerIdentity; signal?: AbortSignal },
  ): EventStream;
  /** Follows a session: its stored events after `after` (all without), then live ones. */
  events(sessionId: string, options?: { after?: number; signal?: AbortSignal }): EventStream;
  /** The session's snapshot. */
  getSession(sessionId: string): Promise<SessionView>;
  /** The tenant's (or the token's) sessions, by id, page after page. */
  listSessions(filters?: {
    limit?: number;
    after?: string;
    identity?: string;
    status?: SessionStatus;
    agent?: string;
  }): AsyncIterable<SessionSummary>;
  /** Every decision of the session in order, page after page (`after`: a step number). */
  decisions(sessionId: string, options?: { limit?: number; after?: number }): AsyncIterable<DecisionStep>;
  /** Ends the open turn; whether one was open. */
  cancel(sessionId: string): Promise<boolean>;
  /** Sets the session's own budget in dollars (`null`: none). */
  setBudget(sessionId: string, budget: string | number | null): Promise<SessionBudget>;
  /** What the tenant's sessions cost, and its budget. */
  usage(): Promise<Usage>;

  /** The session's open interrupts. */
  interrupts(sessionId: string): Promise<OpenInterrupt[]>;
  /** Resumes an interrupt (a payload its schema refuses is a BadRequestError naming the field). */
  resume(sessionId: string, interruptId: string, payload?: Json): Promise<InputAccepted>;
  /** Answers a client tool call (a `tool.call` event) with its result. */
  toolResult(sessionId: string, callId: string, result: Json, options?: { attempt?: number }): Promise<InputAccepted>;
  /** Answers a client tool call with an error. */
  toolError(
    sessionId: string,
    callId: string,
    error: string,
    options?: { retryable?: boolean; attempt?: number },
  ): Promise<InputAccepted>;

  /** Uploads a component as a version of `agentId` (current unless `activate: false`). */
  uploadAgent(agentId: string, wasm: Uint8Array | ArrayBuffer | Blob, options?: { activate?: boolean }): Promise<Agent>;
  /** Registers an HTTP worker as a version of `agentId`. */
  registerWorker(agentId: string, url: string, options?: { secret?: string; activate?: boolean }): Promise<Agent>;
  getAgent(agentId: string): Promise<Agent>;
  listAgents(): Promise<Agent[]>;
  deleteAgent(agentId: string): Promise<void>;
  /** The agent's stored versions, in upload order. */
  agentVersions(agentId: string): Promise<AgentVersion[]>;
  /** Makes a stored version current (also a rollback). */
  activate(agentId: string, version: string): Promise<Agent>;
  /** Removes a stored version that is not current. */
  deleteVersion(agentId: string, version: string): Promise<Agent>;
  /** Has `version` decide again what the agent decided before. */
  replay(
    agentId: string,
    version: string,
    options?: { sessions?: string[]; maxSessions?: number; since?: number; limit?: number; timeoutSecs?: number },
  ): Promise<ReplayReport>;

  /** A five-minute token for `?token=` on the events endpoint. */
  streamToken(): Promise<Token>;
  /** An end-user token: it reaches only `identity`'s sessions (only `sessionId` when given). */
  endUserToken(
    identity: string | WorkerIdentity,
    options?: { metadata?: Record<string, string>; sessionId?: string; ttlSecs?: number },
  ): Promise<Token>;

  /** `{status: "ok"}` when the server is up. */
  healthz(): Promise<{ status: string }>;
}

/** A client of the admin API, with the operator key. */
export declare class AdminClient {
  constructor(baseUrl: string, options: ClientOptions & { key: string });
  listTenants(): Promise<Tenant[]>;
  getTenant(tenant: string): Promise<Tenant>;
  /** Creates the tenant (or answers the existing one), setting `limits` when given. */
  putTenant(tenant: string, options?: { limits?: { [key: string]: Json } }): Promise<Tenant>;
  deleteTenant(tenant: string): Promise<TenantDeleted>;
  getLimits(tenant: string): Promise<TenantLimits>;
  /** Replaces what the operator set (`{}`: the config file's again). */
  setLimits(tenant: string, limits: { [key: string]: Json }): Promise<TenantLimits>;
  listKeys(tenant?: string): Promise<KeyInfo[]>;
  createKey(tenant: string, options?: { name?: string }): Promise<NewKey>;
  /** Revokes a key named by its hash, 8 or more of its leading characters, or its prefix. */
  revokeKey(key: string): Promise<RevokedKey>;
}

/** A `client.message` input: a user message to `agentId`'s session. */
export declare function userMessage(agentId: string, content: Content, options?: { turnId?: string }): ClientMessageInput;

/** `id` percent-encoded as one path segment, as the server reads ids. */
export declare function segment(id: string): string;
