// Drives subs' AG-UI endpoint with the official AG-UI client, as a
// CopilotKit / @ag-ui/client frontend would, and prints a JSON summary for
// tests/all/agui.rs to assert on.
//
//   node run.mjs <base URL> <API key>
//
// Every event is read twice: as the server sent it (the response body,
// teed off the client's fetch), checked against @ag-ui/core's published
// zod schemas (EventSchemas) and the client's sequence rules
// (verifyEvents); and as HttpAgent applied it (its subscriber), which is
// what an application sees. Any invalid event fails the script.

import { HttpAgent, verifyEvents } from "@ag-ui/client";
import { EventSchemas, RunAgentInputSchema } from "@ag-ui/core/schemas";
import { from, lastValueFrom, toArray } from "rxjs";

const [base, key] = process.argv.slice(2);
if (!base || !key) {
  console.error("usage: node run.mjs <base URL> <API key>");
  process.exit(2);
}

/** The `data:` events of a server-sent event stream's text. */
function parseSse(text) {
  const events = [];
  for (const block of text.split(/\n\n/)) {
    const data = block
      .split("\n")
      .filter((line) => line.startsWith("data:"))
      .map((line) => line.slice(5).replace(/^ /, ""));
    if (data.length) events.push(JSON.parse(data.join("\n")));
  }
  return events;
}

/** Checks one run's wire events against the published schemas and the
 *  protocol's sequence rules; throws naming the first bad event. */
async function validate(wire) {
  wire.forEach((event, i) => {
    const parsed = EventSchemas.safeParse(event);
    if (!parsed.success) {
      throw new Error(`event ${i} ${JSON.stringify(event)} breaks the AG-UI schema: ${parsed.error.message}`);
    }
  });
  await lastValueFrom(from(wire).pipe(verifyEvents(false), toArray()));
}

/** An HttpAgent for `agentId` on `threadId`, keeping the wire events of
 *  each run. */
function agent(agentId, threadId, messages = []) {
  const wire = [];
  const agent = new HttpAgent({
    url: `${base}/v1/agents/${agentId}/ag-ui`,
    headers: { Authorization: `Bearer ${key}` },
    threadId,
    initialMessages: messages,
    fetch: async (url, init) => {
      // What the client sends is a RunAgentInput by the published schema.
      RunAgentInputSchema.parse(JSON.parse(init.body));
      const response = await fetch(url, init);
      if (response.ok) wire.push(response.clone().text().then(parseSse));
      return response;
    },
  });
  return { agent, wire };
}

/** Runs the agent once; returns the run's wire events (validated), the
 *  events the client applied, and the client's result. */
async function run(handle, parameters) {
  const applied = [];
  const before = handle.wire.length;
  const result = await handle.agent.runAgent(parameters, {
    onEvent: ({ event }) => {
      applied.push(event);
    },
  });
  if (handle.wire.length !== before + 1) throw new Error("the run made no request");
  const wire = await handle.wire[before];
  await validate(wire);
  return { wire, applied, result };
}

const types = (events) => events.map((e) => e.type);
const of = (events, type) => events.filter((e) => e.type === type);
const finished = (events) => of(events, "RUN_FINISHED")[0] ?? null;
const lastAssistant = (agent) => [...agent.messages].reverse().find((m) => m.role === "assistant") ?? null;
const user = (id, content) => ({ id, role: "user", content });

const summary = {};

// A streamed text turn, then a second run on the same thread.
{
  const h = agent("tools", "agui-text", [user("u1", "hello there")]);
  const first = await run(h, { runId: "text-run-1" });
  const afterFirst = h.agent.messages.map((m) => ({ id: m.id, role: m.role }));
  const firstFinal = lastAssistant(h.agent)?.content ?? null;
  h.agent.addMessage(user("u2", "and again"));
  const second = await run(h, { runId: "text-run-2" });
  summary.text = {
    types: types(first.wire),
    deltas: of(first.wire, "TEXT_MESSAGE_CONTENT").map((e) => e.delta),
    final: firstFinal,
    messages_after_first: afterFirst,
    finished: finished(first.wire),
    second_types: types(second.wire),
    second_final: lastAssistant(h.agent)?.content ?? null,
    messages: h.agent.messages.map((m) => ({ id: m.id, role: m.role, content: m.content ?? null })),
  };
}

// A server-side tool: the agent's own `add`.
{
  const h = agent("tools", "agui-tool", [user("u1", 'use tool add with {"a": 2, "b": 3}')]);
  const r = await run(h, { runId: "tool-run-1" });
  const start = of(r.wire, "TOOL_CALL_START")[0];
  summary.server_tool = {
    types: types(r.wire),
    call: start ? { id: start.toolCallId, name: start.toolCallName } : null,
    args: of(r.wire, "TOOL_CALL_ARGS").map((e) => e.delta).join(""),
    results: of(r.wire, "TOOL_CALL_RESULT").map((e) => ({ toolCallId: e.toolCallId, content: e.content })),
    final: lastAssistant(h.agent)?.content ?? null,
    finished: finished(r.wire),
  };
}

// A frontend tool: run 1 ends asking for it; the frontend runs it and
// sends its result in run 2, which finishes the turn.
{
  const tools = [
    {
      name: "confirm",
      description: "Asks the user to confirm.",
      parameters: { type: "object", properties: { ok: { type: "boolean" } } },
    },
  ];
  const h = agent("tools", "agui-frontend", [user("u1", 'use tool confirm with {"ok": true}')]);
  const first = await run(h, {
    runId: "front-run-1",
    tools,
    context: [{ description: "The user's name", value: "Ada" }],
    forwardedProps: { locale: "en" },
  });
  const pending = finished(first.wire)?.outcome?.pendingToolCallIds ?? [];
  const call = h.agent.messages.flatMap((m) => m.toolCalls ?? []).find((c) => pending.includes(c.id));
  if (call) {
    h.agent.addMessage({
      id: "frontend-result-1",
      role: "tool",
      toolCallId: call.id,
      content: JSON.stringify({ confirmed: JSON.parse(call.function.arguments).ok }),
    });
  }
  const second = await run(h, { runId: "front-run-2", tools });
  summary.frontend_tool = {
    first_types: types(first.wire),
    first_finished: finished(first.wire),
    call: call ? { id: call.id, name: call.function.name, arguments: call.function.arguments } : null,
    second_types: types(second.wire),
    second_finished: finished(second.wire),
    results: of(second.wire, "TOOL_CALL_RESULT").map((e) => ({ toolCallId: e.toolCallId, content: e.content })),
    final: lastAssistant(h.agent)?.content ?? null,
    messages: h.agent.messages.map((m) => ({ id: m.id, role: m.role })),
  };
}

// An interrupt: run 1 ends with it; run 2 resumes it with AG-UI's
// `resume`, and a second thread is resumed the LangGraph way, with
// `forwardedProps.command.resume` from a client that does not track it.
{
  const h = agent("scenario", "agui-interrupt", [user("u1", "interrupt before you go on")]);
  const first = await run(h, { runId: "int-run-1" });
  const open = h.agent.pendingInterrupts.map((i) => i.id);
  const second = await run(h, {
    runId: "int-run-2",
    resume: open.map((interruptId) => ({ interruptId, status: "resolved", payload: { approved: true } })),
  });

  const g = agent("scenario", "agui-interrupt-lg", [user("u1", "interrupt before you go on")]);
  const lgFirst = await run(g, { runId: "lg-run-1" });
  const fresh = agent("scenario", "agui-interrupt-lg", g.agent.messages);
  const lgSecond = await run(fresh, { runId: "lg-run-2", forwardedProps: { command: { resume: { approved: "yes" } } } });
  summary.interrupt = {
    first_types: types(first.wire),
    first_finished: finished(first.wire),
    pending: open,
    second_types: types(second.wire),
    second_finished: finished(second.wire),
    second_final: lastAssistant(h.agent)?.content ?? null,
    langgraph_first_outcome: finished(lgFirst.wire)?.outcome?.type ?? null,
    langgraph_second_finished: finished(lgSecond.wire),
    langgraph_final: lastAssistant(fresh.agent)?.content ?? null,
  };
}

// The agent's state: STATE_SNAPSHOT when a decision changes it.
{
  const h = agent("scenario", "agui-state", [user("u1", "count this turn")]);
  const first = await run(h, { runId: "state-run-1" });
  h.agent.addMessage(user("u2", "count this one too"));
  const second = await run(h, { runId: "state-run-2" });
  summary.state = {
    snapshots: [...of(first.wire, "STATE_SNAPSHOT"), ...of(second.wire, "STATE_SNAPSHOT")].map((e) => e.snapshot),
    agent_state: h.agent.state,
    types: types(first.wire),
  };
}

console.log(JSON.stringify(summary));
