// Talks to subs's AI SDK endpoint with the AI SDK's own machinery:
// `DefaultChatTransport` (what `useChat` uses by default) sends the
// requests and parses the stream with the SDK's chunk schema, and
// `readUIMessageStream` assembles the `UIMessage`s, as `useChat` does.
// Prints one JSON summary for tests/all/aisdk.rs to assert on.
//
// Usage: node chat.mjs <server base URL> <API key>

import { DefaultChatTransport, readUIMessageStream } from "ai";

const [base, key] = process.argv.slice(2);
if (!base || !key) {
  console.error("usage: node chat.mjs <base URL> <API key>");
  process.exit(2);
}

const transport = (agent) =>
  new DefaultChatTransport({
    api: `${base}/v1/agents/${agent}/ai-sdk`,
    headers: { Authorization: `Bearer ${key}` },
  });

const user = (id, text) => ({ id, role: "user", parts: [{ type: "text", text }] });

// Reads a stream of chunks into the UIMessage it builds (continuing
// `message` when given, as useChat continues the last assistant message),
// and the chunk types in order.
async function read(stream, message) {
  const [forTypes, forMessage] = stream.tee();
  const types = [];
  const typing = (async () => {
    for await (const chunk of forTypes) types.push(chunk.type);
  })();
  let last;
  for await (const built of readUIMessageStream({
    message: message && structuredClone(message),
    stream: forMessage,
    terminateOnError: true,
  })) {
    last = built;
  }
  await typing;
  return { message: last, chunks: types };
}

async function send(chat, agent, messages, options = {}) {
  const stream = await transport(agent).sendMessages({
    chatId: chat,
    messages,
    trigger: options.trigger ?? "submit-message",
    messageId: options.messageId,
    abortSignal: undefined,
    body: options.body,
  });
  return read(stream, options.continuing);
}

const summary = {};

// A streamed text turn: the agent streams `hel`, `lo`, then records `hello`.
{
  const sent = await send("aisdk-text", "streamer", [user("t-u1", "hi")]);
  summary.text = sent;
}

// A tool turn, a second request on the same chat, then a regenerate.
{
  const chat = "aisdk-tools";
  const history = [user("k-u1", 'use tool add with {"a": 1, "b": 2}')];
  const first = await send(chat, "tools", history);
  history.push(first.message, user("k-u2", 'use tool add with {"a": 3, "b": 4}'));
  const second = await send(chat, "tools", history);
  // `regenerate` sends the messages up to the user message it answers.
  const regenerated = await send(chat, "tools", history, {
    trigger: "regenerate-message",
    messageId: second.message.id,
  });
  summary.tools = { first, second, regenerated };
}

// A client tool round trip: the stream stops at the tool's input; the next
// request carries the output (as `addToolOutput` leaves the part), and the
// turn goes on in the same assistant message.
{
  const chat = "aisdk-client";
  const tools = [
    {
      name: "confirm",
      description: "Asks the user to confirm.",
      input: { type: "object", properties: { ok: { type: "boolean" } } },
      handler: "client",
    },
  ];
  const question = user("c-u1", 'use tool confirm with {"ok": true}');
  const asked = await send(chat, "helper", [question], { body: { tools } });
  const answered = structuredClone(asked.message);
  for (const part of answered.parts) {
    if (part.type === "tool-confirm") {
      part.state = "output-available";
      part.output = { confirmed: true };
    }
  }
  const resumed = await send(chat, "helper", [question, answered], {
    messageId: answered.id,
    body: { tools },
    continuing: answered,
  });
  summary.client = { asked, resumed };
}

// The same with a model call that streams, and a client tool the agent's
// own config declares: the tool's input arrives in pieces.
{
  const chat = "aisdk-live";
  const question = user("l-u1", 'use tool confirm with {"ok": true}');
  const asked = await send(chat, "live", [question]);
  const answered = structuredClone(asked.message);
  for (const part of answered.parts) {
    if (part.type === "tool-confirm") {
      part.state = "output-available";
      part.output = { confirmed: true };
    }
  }
  const resumed = await send(chat, "live", [question, answered], { continuing: answered });
  summary.live = { asked, resumed };
}

// An interrupt, a reconnect to the turn while it waits, the resume, and a
// reconnect once nothing runs.
{
  const chat = "aisdk-wait";
  const question = user("w-u1", "interrupt here");
  const waiting = await send(chat, "scenario", [question]);
  const stream = await transport("scenario").reconnectToStream({ chatId: chat });
  const reconnected = stream ? await read(stream) : null;
  const resumed = await send(chat, "scenario", [question, waiting.message], {
    body: { resume: { interrupt_id: "approval", payload: "go" } },
    continuing: waiting.message,
  });
  const after = await transport("scenario").reconnectToStream({ chatId: chat });
  summary.wait = { waiting, reconnected, resumed, reconnect_after_end: after === null ? null : "a stream" };
}

console.log(JSON.stringify(summary));
