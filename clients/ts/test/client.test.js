// The client against a real `subs serve` (see support/server.js).

import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { readFileSync, readdirSync } from "node:fs";
import { createServer } from "node:http";
import { dirname, join } from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";

import {
  AdminClient,
  Client,
  AuthenticationError,
  BadRequestError,
  ConflictError,
  NotFoundError,
  PermissionDeniedError,
  SseReaderForTests,
  userMessage,
} from "./support/imports.js";
import { ADD, cuttingProxy, scenarioWasm, settled, startServer, toolsWasm } from "./support/server.js";

let server;
before(async () => {
  server = await startServer();
});
after(() => server?.stop());

/** A fresh session id, with characters that need encoding in a path. */
const session = () => `ts/${randomUUID().slice(0, 8)} ü*`;
const names = (events) => events.map((e) => e.event);
const stored = (events) => events.filter((e) => e.id !== undefined).map((e) => e.id);

async function collect(stream, until) {
  const out = [];
  for await (const event of stream) {
    out.push(event);
    if (until && until(event)) break;
  }
  return out;
}

test("a tool turn streams from start to end", async () => {
  const subs = server.client();
  const chat = session();
  const events = await collect(subs.streamMessage(chat, "tools", ADD));
  assert.equal(events[0].event, "turn.started", names(events).join());
  assert.equal(events.at(-1).event, "turn.done");
  assert.equal(events.at(-1).data.turn_id, events[0].data.turn_id);
  const messages = events.filter((e) => e.event === "message").map((e) => e.data.message);
  assert.deepEqual(messages.map((m) => m.role), ["user", "assistant", "tool", "assistant"]);
  assert.deepEqual(JSON.parse(messages[2].content), { sum: 3 });
  const ids = stored(events);
  assert.deepEqual(ids, [...new Set(ids)].sort((a, b) => a - b));
  const view = await subs.getSession(chat);
  assert.equal(view.status, "idle");
  assert.equal(view.last_event_id, ids.at(-1));
  // Its decisions, a page of one at a time.
  const steps = [];
  for await (const step of subs.decisions(chat, { limit: 1 })) steps.push(step);
  assert.ok(steps.length >= 3);
  assert.deepEqual(steps.map((s) => s.seq), steps.map((_, i) => i));
  assert.ok(steps.every((s) => s.status === "applied"));
});

test("a stream cut mid-turn resumes and yields every event once", async () => {
  const proxy = await cuttingProxy(server.url, 2);
  const chat = session();
  let events;
  try {
    events = await collect(server.client({ url: proxy.url }).streamMessage(chat, "tools", ADD));
    assert.equal(proxy.cuts, 1, "the first stream was cut");
    assert.ok(proxy.connections >= 2, "the client reconnected");
  } finally {
    proxy.close();
  }
  const everything = await collect(server.client().events(chat), (e) => e.event === "turn.done");
  assert.deepEqual(stored(events), stored(everything));
  assert.deepEqual(
    events.filter((e) => e.id !== undefined).map((e) => [e.event, e.data]),
    everything.map((e) => [e.event, e.data]),
  );
  assert.equal(events.at(-1).event, "turn.done");
});

test("an interrupt is listed, refused with its field, and resumed", async () => {
  const subs = server.client();
  const chat = session();
  const accepted = await subs.sendMessage(chat, "scenario", "interrupt with schema");
  assert.equal(accepted.existing, false);
  await settled(subs, chat, "waiting");
  const [interrupt] = await subs.interrupts(chat);
  assert.equal(interrupt.interrupt_id, "approval");
  assert.deepEqual(interrupt.resume_schema.required, ["approved"]);
  const afterId = (await subs.getSession(chat)).last_event_id;

  const refused = await subs.resume(chat, "approval", { approved: "yes" }).catch((e) => e);
  assert.ok(refused instanceof BadRequestError, String(refused));
  assert.deepEqual([refused.status, refused.code, refused.field], [400, "invalid_input", "payload.approved"]);
  assert.equal((await subs.interrupts(chat)).length, 1, "still open");

  await subs.resume(chat, "approval", { approved: true });
  await assert.rejects(subs.resume(chat, "approval", { approved: true }), ConflictError);
  const seen = await collect(subs.events(chat, { after: afterId }), (e) => e.event === "turn.done");
  assert.equal(seen[0].event, "interrupt.resumed");
  assert.deepEqual(seen[0].data.payload, { approved: true });
  const replies = seen.filter((e) => e.event === "message").map((e) => e.data.message.content);
  assert.deepEqual(replies, ['resumed with {"approved":true}']);
  assert.deepEqual(await subs.interrupts(chat), []);
});

test("a client tool is answered while the turn streams", async () => {
  const subs = server.client();
  const chat = session();
  const confirm = {
    name: "confirm",
    description: "Asks the user.",
    input: { type: "object", properties: { ok: { type: "boolean" } } },
  };
  const ask = {
    type: "client.messages",
    agent_id: "tools",
    client: { tools: [confirm] },
    messages: [{ role: "user", content: 'use tool confirm with {"ok": true}' }],
  };
  const events = [];
  for await (const event of subs.stream(chat, ask)) {
    events.push(event);
    if (event.event === "tool.call") {
      assert.equal(event.data.name, "confirm");
      assert.deepEqual(JSON.parse(event.data.arguments), { ok: true });
      await subs.toolResult(chat, event.data.id, { confirmed: "yes" });
    }
  }
  assert.ok(names(events).includes("tool.call"));
  assert.equal(events.at(-1).event, "turn.done");
  const tool = events.filter((e) => e.event === "message" && e.data.message.role === "tool");
  assert.deepEqual(JSON.parse(tool[0].data.message.content), { confirmed: "yes" });
  await assert.rejects(subs.toolResult(chat, "no-such-call", 1), ConflictError);
});

test("an agent is uploaded inactive, then activated", async () => {
  const subs = server.client();
  const agent = `agent-${randomUUID().slice(0, 6)}`;
  const first = await subs.uploadAgent(agent, toolsWasm(), { activate: false }).catch((e) => e);
  assert.ok(first instanceof ConflictError);
  assert.equal(first.code, "no_active_version");
  const v1 = (await subs.uploadAgent(agent, toolsWasm())).version;
  assert.equal((await subs.uploadAgent(agent, scenarioWasm(), { activate: false })).version, v1);
  const versions = await subs.agentVersions(agent);
  assert.deepEqual(versions.map((v) => v.active), [true, false]);
  const v2 = versions[1].version;
  assert.equal((await subs.activate(agent, v2)).version, v2);
  assert.equal((await subs.getAgent(agent)).version, v2);
  assert.ok((await subs.listAgents()).some((a) => a.agent_id === agent));
  const chat = session();
  const done = await collect(subs.stream(chat, { type: "client.messages", agent_id: agent, messages: [{ role: "user", content: "count" }] }));
  assert.equal(done.at(-1).event, "turn.done");
  const report = await subs.replay(agent, v2, { sessions: [chat] });
  assert.equal(report.version, v2);
  assert.equal(report.sessions, 1);
  await subs.activate(agent, v1);
  assert.deepEqual((await subs.deleteVersion(agent, v2)).versions.map((v) => v.version), [v1]);
  const missing = await subs.activate(agent, v2).catch((e) => e);
  assert.ok(missing instanceof NotFoundError);
  assert.equal(missing.field, "version");
  await subs.deleteAgent(agent);
  await assert.rejects(subs.getAgent(agent), NotFoundError);
});

test("an end-user token reaches only its own sessions", async () => {
  const subs = server.client();
  const theirs = session();
  await subs.sendMessage(theirs, "tools", "hello");
  const token = await subs.endUserToken("user-7", { metadata: { plan: "pro" }, ttlSecs: 60 });
  assert.equal(token.identity.id, "user-7");
  const bound = await subs.endUserToken("user-7", { sessionId: "only-this" });
  const user = server.client({ key: token.token });
  const mine = session();
  const events = await collect(user.streamMessage(mine, "tools", ADD, { identity: { id: "someone-else" } }));
  assert.equal(events.at(-1).event, "turn.done");
  assert.equal((await user.getSession(mine)).identity.id, "user-7");
  const listed = [];
  for await (const s of user.listSessions()) listed.push(s.session_id);
  assert.deepEqual(listed, [mine]);
  await assert.rejects(user.getSession(theirs), NotFoundError);
  await assert.rejects(collect(user.events(theirs)), NotFoundError);
  const forbidden = await user.listAgents().catch((e) => e);
  assert.ok(forbidden instanceof PermissionDeniedError);
  assert.equal(forbidden.code, "forbidden");
  await assert.rejects(server.client({ key: bound.token }).sendMessage(mine, "tools", "hi"), NotFoundError);
  const stranger = await server.client({ key: "subs_not_a_key" }).getSession(mine).catch((e) => e);
  assert.ok(stranger instanceof AuthenticationError);
  assert.equal(stranger.code, "unauthorized");
});

test("a 4xx is thrown as the typed error with its field", async () => {
  const subs = server.client();
  const typo = await subs
    .send(session(), { type: "client.message", agent_id: "tools", message: { role: "user", content: "x" }, paylod: 1 })
    .catch((e) => e);
  assert.ok(typo instanceof BadRequestError, String(typo));
  assert.deepEqual([typo.status, typo.code, typo.field], [400, "invalid_input", "paylod"]);
  assert.match(typo.message, /paylod/);
  const nobody = await subs.sendMessage(session(), "nobody", "hi").catch((e) => e);
  assert.ok(nobody instanceof NotFoundError);
  assert.deepEqual([nobody.code, nobody.field], ["unknown_agent", "agent_id"]);
  const badId = await subs.getSession("bad\u0001id").catch((e) => e);
  assert.equal(badId.field, "session_id");
});

test("sessions are listed by filter, page by page, and cancelled", async () => {
  const subs = server.client();
  const prefix = randomUUID().slice(0, 6);
  const waiting = `${prefix}-wait`;
  await subs.sendMessage(waiting, "scenario", "interrupt");
  await settled(subs, waiting, "waiting");
  for (const n of [0, 1, 2]) await collect(subs.streamMessage(`${prefix}-${n}`, "tools", "hi"));
  const listed = [];
  for await (const s of subs.listSessions({ limit: 2 })) if (s.session_id.startsWith(prefix)) listed.push(s.session_id);
  assert.equal(listed.length, 4);
  assert.deepEqual(listed, [...listed].sort());
  const filtered = [];
  for await (const s of subs.listSessions({ status: "waiting", agent: "scenario" })) filtered.push(s.session_id);
  assert.ok(filtered.includes(waiting));
  assert.equal(await subs.cancel(waiting), true);
  await settled(subs, waiting, "idle");
  assert.equal(await subs.cancel(waiting), false);
});

test("the admin API makes tenants and keys", async () => {
  const admin = server.admin();
  const tenant = `t-${randomUUID().slice(0, 6)}`;
  const made = await admin.putTenant(tenant, { limits: { max_sessions: 5 } });
  assert.deepEqual(made.overrides, { max_sessions: 5 });
  assert.ok((await admin.listTenants()).some((t) => t.tenant === tenant));
  assert.equal((await admin.getLimits(tenant)).limits.max_sessions, 5);
  assert.deepEqual((await admin.setLimits(tenant, {})).overrides, {});
  const key = await admin.createKey(tenant, { name: "ci" });
  assert.deepEqual((await admin.listKeys(tenant)).map((k) => k.prefix), [key.prefix]);
  const subs = server.client({ key: key.key });
  assert.deepEqual(await subs.listAgents(), []);
  await admin.revokeKey(key.hash);
  await assert.rejects(subs.listAgents(), AuthenticationError);
  assert.equal((await admin.deleteTenant(tenant)).deleted, true);
  await assert.rejects(admin.getTenant(tenant), NotFoundError);
  const bad = await admin.setLimits("acme", { max_sessions: "many" }).catch((e) => e);
  assert.equal(bad.field, "max_sessions");
  const notAdmin = await new AdminClient(server.url, { key: server.key }).listTenants().catch((e) => e);
  assert.ok(notAdmin instanceof PermissionDeniedError);
});

test("the SSE reader takes events split anywhere and bounds their size", () => {
  const text = 'event: message\r\ndata: {"a":\r\ndata: 1}\r\nid: 7\r\n\r\n: comment\n\nevent: x\ndata: 2\n\n';
  for (let at = 0; at <= text.length; at += 1) {
    const reader = new SseReaderForTests(1024);
    const events = [...reader.feed(text.slice(0, at)), ...reader.feed(text.slice(at))];
    assert.deepEqual(events, [
      { event: "message", data: { a: 1 }, id: 7 },
      { event: "x", data: 2, id: undefined },
    ]);
  }
  assert.throws(() => new SseReaderForTests(16).feed(`data: ${"x".repeat(32)}`), /maxEventBytes/);
  assert.ok(userMessage("a", "b", { turnId: "t" }).turn_id === "t");
});

// A live `tool.progress` frame comes only from a tool source (an MCP
// server's progress) of a real server: a stand-in server sends it as the
// protocol writes it, the payloads of tests/fixtures/protocol/tool_progress
// (which the Rust type reads and writes back unchanged). The frame's fields
// must be the schema's, whose types the declarations are generated from
// (test/types.ts reads them typed).
test("a stream yields tool.progress frames with the schema's fields", async () => {
  const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
  const dir = join(root, "tests", "fixtures", "protocol", "tool_progress");
  const progress = readdirSync(dir)
    .sort()
    .map((f) => JSON.parse(readFileSync(join(dir, f), "utf8")));
  assert.ok(progress.length > 0, `no fixtures under ${dir}`);
  const schema = JSON.parse(readFileSync(join(root, "engine", "protocol", "schema", "protocol.schema.json"), "utf8"));
  const fields = Object.keys(schema.$defs.ToolProgress.properties).sort();
  const frames = [
    ["turn.started", { turn_id: "t1" }, 0],
    ...progress.map((data) => ["tool.progress", data, undefined]),
    ["turn.done", { turn_id: "t1", data: null }, 1],
  ];
  const stand = createServer((_request, response) => {
    response.writeHead(200, { "content-type": "text/event-stream" });
    for (const [event, data, id] of frames) {
      response.write(`event: ${event}\ndata: ${JSON.stringify(data)}\n${id === undefined ? "" : `id: ${id}\n`}\n`);
    }
  });
  await new Promise((resolve) => stand.listen(0, "127.0.0.1", resolve));
  try {
    const subs = new Client(`http://127.0.0.1:${stand.address().port}`, { key: "subs_x" });
    const seen = await collect(subs.events("s1"), (e) => e.event === "turn.done");
    assert.deepEqual(names(seen), names(frames.map(([event]) => ({ event }))));
    const got = seen.filter((e) => e.event === "tool.progress");
    assert.deepEqual(
      got.map((e) => e.data),
      progress,
    );
    for (const frame of got) {
      assert.equal(frame.id, undefined, "progress is live only");
      assert.deepEqual(Object.keys(frame.data).sort(), fields, "the frame's fields are the schema's");
    }
  } finally {
    stand.closeAllConnections();
    await new Promise((resolve) => stand.close(resolve));
  }
});
