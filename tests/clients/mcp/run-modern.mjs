// Calls subs agents through their MCP endpoints with the official MCP
// TypeScript SDK's 2.x client (`@modelcontextprotocol/client`: `Client`
// over `StreamableHTTPClientTransport`) at the stateless revision
// (2026-07-28), and prints a JSON summary for
// engine/cli/tests/all/mcp_endpoint.rs to assert on.
//
//   node run-modern.mjs <base URL> <reply agent> <approver agent> <refund message>
//
// Scenarios, each with a client of its own:
// - discover: version negotiation `auto` (the SDK probes with
//   `server/discover`) picks the stateless revision;
// - reply: pinned to 2026-07-28, tools/list, then a call with progress;
// - elicit: a client with the elicitation capability approves the refund
//   the approver asks about (an `input_required` result, which the SDK
//   fulfils through its `elicitation/create` handler and retries);
// - resume: a client without it gets the open interrupt and a session id,
//   and answers with a second call naming that session.

import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";

const MODERN = "2026-07-28";
const [base, replyAgent, approver, refund] = process.argv.slice(2);
if (!base || !replyAgent || !approver || !refund) {
  console.error("usage: node run-modern.mjs <base URL> <reply agent> <approver agent> <refund message>");
  process.exit(2);
}

/** A connected client of `agent`'s endpoint, negotiating per `mode`; with
 *  `elicit`, one that declares the elicitation capability and answers
 *  with it. */
async function connect(agent, mode, elicit) {
  const capabilities = elicit ? { elicitation: {} } : {};
  const client = new Client({ name: "subs-test", version: "1.0.0" }, { capabilities, versionNegotiation: { mode } });
  if (elicit) client.setRequestHandler("elicitation/create", (request) => elicit(request.params));
  const transport = new StreamableHTTPClientTransport(new URL(`${base}/v1/agents/${agent}/mcp`));
  await client.connect(transport);
  return client;
}

const text = (result) => result.content.filter((c) => c.type === "text").map((c) => c.text);
const summary = {};

{
  const client = await connect(replyAgent, "auto", null);
  summary.discover = {
    era: client.getProtocolEra(),
    protocol: client.getNegotiatedProtocolVersion(),
    server: client.getServerVersion(),
  };
  await client.close();
}

{
  const client = await connect(replyAgent, { pin: MODERN }, null);
  const tools = await client.listTools();
  const progress = [];
  const result = await client.callTool(
    { name: replyAgent, arguments: { message: "hello" } },
    { onprogress: (p) => progress.push(p) },
  );
  summary.reply = {
    era: client.getProtocolEra(),
    protocol: client.getNegotiatedProtocolVersion(),
    tools: tools.tools,
    text: text(result),
    isError: result.isError ?? false,
    meta: result._meta,
    progress,
  };
  await client.close();
}

{
  const asked = [];
  const client = await connect(approver, { pin: MODERN }, async (params) => {
    asked.push(params);
    return { action: "accept", content: { approved: true } };
  });
  const result = await client.callTool({ name: approver, arguments: { message: refund } });
  summary.elicit = { asked, text: text(result), isError: result.isError ?? false, meta: result._meta };
  await client.close();
}

{
  const client = await connect(approver, { pin: MODERN }, null);
  const first = await client.callTool({ name: approver, arguments: { message: refund } });
  const session_id = first.structuredContent.session_id;
  const second = await client.callTool({
    name: approver,
    arguments: { message: JSON.stringify({ approved: true }), session_id },
  });
  summary.resume = {
    first: { text: text(first), structured: first.structuredContent, isError: first.isError ?? false },
    second: { text: text(second), isError: second.isError ?? false, meta: second._meta },
  };
  await client.close();
}

console.log(JSON.stringify(summary));
