// Calls subs agents through their MCP endpoints with the official MCP
// TypeScript SDK (`Client` over `StreamableHTTPClientTransport`), as a
// desktop assistant or IDE would, and prints a JSON summary for
// engine/cli/tests/all/mcp_endpoint.rs to assert on.
//
//   node run.mjs <base URL> <reply agent> <approver agent> <refund message>
//
// Scenarios, each its own MCP session:
// - reply: tools/list, then a call with progress;
// - elicit: a client with the elicitation capability approves the refund
//   the approver asks about;
// - resume: a client without it gets the open interrupt and a session id,
//   and answers with a second call naming that session;
// - cancel: a client aborts its call while the approver waits for the
//   answer (the SDK sends notifications/cancelled);
// - ended: after DELETE (terminateSession), the old session id is refused.

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ElicitRequestSchema } from "@modelcontextprotocol/sdk/types.js";

const [base, replyAgent, approver, refund] = process.argv.slice(2);
if (!base || !replyAgent || !approver || !refund) {
  console.error("usage: node run.mjs <base URL> <reply agent> <approver agent> <refund message>");
  process.exit(2);
}

/** A connected client of `agent`'s endpoint; with `elicit`, one that
 *  declares the elicitation capability and answers with it. */
async function connect(agent, elicit) {
  const capabilities = elicit ? { elicitation: {} } : {};
  const client = new Client({ name: "subs-test", version: "1.0.0" }, { capabilities });
  if (elicit) client.setRequestHandler(ElicitRequestSchema, (request) => elicit(request.params));
  const transport = new StreamableHTTPClientTransport(new URL(`${base}/v1/agents/${agent}/mcp`));
  await client.connect(transport);
  return { client, transport };
}

const text = (result) => result.content.filter((c) => c.type === "text").map((c) => c.text);
const summary = {};

// A turn's reply, with its progress.
{
  const { client, transport } = await connect(replyAgent, null);
  const tools = await client.listTools();
  const progress = [];
  const result = await client.callTool({ name: replyAgent, arguments: { message: "hello" } }, undefined, {
    onprogress: (p) => progress.push(p),
  });
  summary.reply = {
    protocol: transport.protocolVersion,
    server: client.getServerVersion(),
    tools: tools.tools,
    text: text(result),
    isError: result.isError ?? false,
    meta: result._meta,
    progress,
  };
  await client.close();
}

// An interrupt answered by elicitation.
{
  const asked = [];
  const { client } = await connect(approver, async (params) => {
    asked.push(params);
    return { action: "accept", content: { approved: true } };
  });
  const result = await client.callTool({ name: approver, arguments: { message: refund } });
  summary.elicit = { asked, text: text(result), isError: result.isError ?? false, meta: result._meta };
  await client.close();
}

// The same without the capability: the open interrupt, then a second call
// with the session id that answers it.
{
  const { client } = await connect(approver, null);
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

// A call cancelled while the agent waits for its answer.
{
  const controller = new AbortController();
  const session_id = "mcp-cancelled";
  let asked = false;
  const { client } = await connect(approver, () => {
    asked = true;
    // Gives up on the call instead of answering: the SDK sends
    // notifications/cancelled for it.
    setTimeout(() => controller.abort("the user gave up"), 10);
    return new Promise(() => {});
  });
  let error = null;
  try {
    await client.callTool({ name: approver, arguments: { message: refund, session_id } }, undefined, {
      signal: controller.signal,
    });
  } catch (e) {
    error = String(e);
  }
  summary.cancel = { asked, error, session_id };
  // Time for the notification to be sent before the client goes.
  await new Promise((resolve) => setTimeout(resolve, 200));
  await client.close();
}

// A session ended by DELETE is gone.
{
  const { client, transport } = await connect(replyAgent, null);
  const id = transport.sessionId;
  await transport.terminateSession();
  const response = await fetch(`${base}/v1/agents/${replyAgent}/mcp`, {
    method: "POST",
    headers: {
      "content-type": "application/json",
      accept: "application/json, text/event-stream",
      "mcp-session-id": id,
      "mcp-protocol-version": transport.protocolVersion,
    },
    body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/list" }),
  });
  summary.ended = { status: response.status, body: await response.json() };
  await client.close().catch(() => {});
}

console.log(JSON.stringify(summary));
