"""A Python agent (the Python SDK) that uses the MCP server `demo`: it takes
the engine's proposals and names the server in its config's `mcp`. Served
over HTTP as a worker (the SDK's native `decide_json`).

Usage: python3 agent.py   (prints the port it listens on, on 127.0.0.1)
"""

import json
import os
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "../../../guest-sdk/python/src"))

from subs_sdk import Agent  # noqa: E402
from subs_sdk.protocol import McpServerUse, SessionStart  # noqa: E402
from subs_sdk.testing import RecordingHost  # noqa: E402


class UsesMcp(Agent):
    def decide(self, request, cx):
        decision = request.proposed
        if isinstance(request.trigger, SessionStart) and decision.agent is not None:
            decision.agent.mcp = [McpServerUse(server="demo")]
        return decision


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        decision = json.dumps(RecordingHost().decide_json(UsesMcp(), body)).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(decision)))
        self.end_headers()
        self.wfile.write(decision)

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
