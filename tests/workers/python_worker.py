#!/usr/bin/env python3
"""A subs HTTP worker in plain Python (standard library only), written from
the project's docs (docs/protocol.md and docs/http-workers.md), not from
any SDK.

It runs one agent with one tool of its own, `multiply`:

- `session.start`: answers with an agent config that declares the tool;
- `tool.execute` for `multiply`: runs it and settles the call with a
  `tool.result` (or a `tool.error` for bad input or an unknown tool);
- every other trigger: returns `proposed` unchanged.

Every request must carry `Subs-Signature: t=<unix>,v1=<hex HMAC-SHA256(
secret, "<t>.<body>")>` made with SUBS_WORKER_SECRET, within five minutes
of this clock; others are refused with 401 and `{"error": ...}`.

Usage: SUBS_WORKER_SECRET=... python3 python_worker.py [port]
It listens on 127.0.0.1 (port 0, the default, picks a free one) and prints
the port it listens on as the first line of stdout.
"""

import hashlib
import hmac
import json
import os
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SECRET = os.environ.get("SUBS_WORKER_SECRET", "").encode()
TOLERANCE_SECS = 300

MULTIPLY = {
    "name": "multiply",
    "description": "Multiplies two numbers.",
    "input": {
        "type": "object",
        "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
        "required": ["a", "b"],
        "additionalProperties": False,
    },
}


def signature_problem(header, body):
    """Why `header` does not sign `body`, or None when it does."""
    if not SECRET:
        return None
    if not header:
        return "missing Subs-Signature header"
    fields = {}
    macs = []
    for part in header.split(","):
        key, sep, value = part.strip().partition("=")
        if not sep:
            return "malformed Subs-Signature header"
        if key == "v1":
            macs.append(value)
        else:
            fields[key] = value
    t = fields.get("t", "")
    if not t.isdigit() or not macs:
        return "malformed Subs-Signature header"
    expected = hmac.new(SECRET, t.encode() + b"." + body, hashlib.sha256).hexdigest()
    if not any(hmac.compare_digest(expected, mac) for mac in macs):
        return "signature mismatch"
    if abs(time.time() - int(t)) > TOLERANCE_SECS:
        return "stale signature"
    return None


def multiply(trigger):
    """The action settling a `multiply` call."""
    tool_input = trigger["input"]
    if tool_input["status"] != "valid":
        return {"type": "tool.error", "error": "bad arguments: " + tool_input.get("error", "")}
    args = tool_input["value"]
    return {"type": "tool.result", "result": {"product": args["a"] * args["b"]}}


def decide(request):
    """The DecisionResponse for a DecisionRequest."""
    trigger = request["trigger"]
    proposed = request.get("proposed") or {}
    kind = trigger["type"]
    if kind == "session.start":
        agent = dict((proposed.get("agent") or request.get("agent") or {"model": "subs/offline"}))
        agent["system"] = "You multiply numbers with the multiply tool."
        agent["tools"] = [MULTIPLY]
        decision = dict(proposed)
        decision["agent"] = agent
        return decision
    if kind == "tool.execute":
        if trigger["name"] == "multiply":
            action = multiply(trigger)
        else:
            action = {"type": "tool.error", "error": "unknown tool " + trigger["name"]}
        return {"actions": [action]}
    return proposed


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the engine pools connections

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        problem = signature_problem(self.headers.get("Subs-Signature"), body)
        if problem:
            return self.reply(401, {"error": problem})
        try:
            request = json.loads(body)
        except ValueError as e:
            return self.reply(400, {"error": "not JSON: %s" % e})
        try:
            decision = decide(request)
        except (KeyError, TypeError) as e:
            return self.reply(400, {"error": "unexpected request: %r" % (e,)})
        self.reply(200, decision)

    def reply(self, status, value):
        data = json.dumps(value, separators=(",", ":")).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format, *args):
        sys.stderr.write("python worker: " + (format % args) + "\n")


def main():
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    print(server.server_address[1], flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
