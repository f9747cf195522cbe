// Server-sent events over fetch's ReadableStream (no EventSource, which
// cannot set headers, and no Node-only API), and the bookkeeping that makes
// a reconnected stream yield every event exactly once.
//
// The server numbers each stored event of a session (`id:` 0, 1, 2, …) and,
// given `Last-Event-ID: N`, resumes right after N. Token deltas
// (`llm.token.delta`) and tool progress (`tool.progress`) are live only and
// carry no id: they pass through as they come, and those sent while the
// client was away are gone (the `message` that follows holds the whole
// reply, the tool's result message its outcome).

import { StreamError } from "./errors.js";

const TURN_ENDS = new Set(["turn.done", "turn.failed"]);

/** Reads server-sent events from text as it arrives, per the HTML standard. */
export class SseReader {
  /** @param {number} maxChars the largest event, in characters */
  constructor(maxChars) {
    this.max = maxChars;
    this.buffer = "";
    this.event = "";
    this.data = [];
    this.size = 0;
    this.id = undefined;
    this.skipLf = false;
  }

  /** The events `text` completes. */
  feed(text) {
    const out = [];
    if (this.skipLf && text.startsWith("\n")) text = text.slice(1);
    this.skipLf = false;
    this.buffer += text;
    for (;;) {
      const cr = this.buffer.indexOf("\r");
      const lf = this.buffer.indexOf("\n");
      if (cr < 0 && lf < 0) break;
      const end = cr < 0 ? lf : lf < 0 ? cr : Math.min(cr, lf);
      const line = this.buffer.slice(0, end);
      if (this.buffer[end] === "\r") {
        if (end + 1 === this.buffer.length) {
          // A CR at the end of what arrived: its LF may follow.
          this.skipLf = true;
          this.buffer = "";
        } else {
          this.buffer = this.buffer.slice(this.buffer[end + 1] === "\n" ? end + 2 : end + 1);
        }
      } else {
        this.buffer = this.buffer.slice(end + 1);
      }
      const event = this.line(line);
      if (event) out.push(event);
    }
    if (this.buffer.length + this.size > this.max) {
      throw new StreamError(`an event is larger than maxEventBytes (${this.max})`);
    }
    return out;
  }

  line(line) {
    if (line === "") return this.dispatch();
    if (line.startsWith(":")) return undefined;
    const colon = line.indexOf(":");
    const name = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (name === "event") this.event = value;
    else if (name === "data") {
      this.data.push(value);
      this.size += value.length + 1;
      if (this.size > this.max) throw new StreamError(`an event is larger than maxEventBytes (${this.max})`);
    } else if (name === "id" && !value.includes("\0")) this.id = value;
    return undefined;
  }

  dispatch() {
    const event = this.event || "message";
    const data = this.data;
    const seq = this.id;
    this.event = "";
    this.data = [];
    this.size = 0;
    this.id = undefined;
    if (data.length === 0) return undefined;
    let value;
    try {
      value = JSON.parse(data.join("\n"));
    } catch (e) {
      throw new StreamError(`event \`${event}\` has data that is not JSON: ${e.message}`);
    }
    const id = seq !== undefined && /^[0-9]+$/.test(seq) ? Number(seq) : undefined;
    return { event, data: value, id };
  }
}

/** Which events a stream yields across reconnects. */
export class Resume {
  constructor(after, turnId) {
    /** The id of the last stored event yielded. */
    this.lastId = after;
    /** The turn followed, if any. */
    this.turnId = turnId;
    this.inTurn = false;
    this.done = false;
    this.progressed = false;
  }

  /** Whether to yield `event`, updating what has been seen. */
  accept(event) {
    if (event.id !== undefined) {
      if (this.lastId !== undefined && event.id <= this.lastId) return false;
      this.lastId = event.id;
      this.progressed = true;
    }
    if (this.turnId === undefined) return true;
    const turn = event.data && typeof event.data === "object" ? event.data.turn_id : undefined;
    if (event.event === "turn.started" && turn === this.turnId) this.inTurn = true;
    if (!this.inTurn) return false;
    if (TURN_ENDS.has(event.event) && turn === this.turnId) this.done = true;
    return true;
  }
}

/** Milliseconds to wait before reconnect number `attempt` (1, 2, …). */
export function backoff(attempt) {
  return Math.min(100 * 2 ** (attempt - 1), 2000);
}
