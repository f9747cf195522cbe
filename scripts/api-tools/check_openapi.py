"""Checks a running `subs serve` against its own OpenAPI document.

1. The document is valid OpenAPI 3.1 (openapi-spec-validator).
2. Every operation is called at least once and each answer (and each
   request sent) is checked against the document (openapi-core).
3. openapi-python-client generates a client from the document, and that
   client creates a session, sends it an input and reads its snapshot.

    python check_openapi.py --url http://127.0.0.1:PORT --admin-key KEY \
        --wasm tools.wasm --work DIR

The server must have the operator key KEY and no tenant `acme`; its
default model must be the offline one (the `tools` component's `add` turn
runs without a provider). Prints what it checked; exits non-zero naming
every mismatch.
"""

import argparse
import importlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx
from openapi_core import OpenAPI
from openapi_core.testing import MockRequest, MockResponse
from openapi_spec_validator import OpenAPIV31SpecValidator

ADD = 'use tool add with {"a": 1, "b": 2}'


class Checker:
    def __init__(self, url, document):
        self.url = url
        self.document = document
        self.api = OpenAPI.from_dict(document)
        self.http = httpx.Client(base_url=url, timeout=60)
        self.called = set()
        self.failures = []

    def operation(self, method, path):
        return self.document["paths"][path][method.lower()]["operationId"]

    def call(self, method, path, concrete, key=None, body=None, content_type=None, params=None,
             expect=None, stream_until=None, headers=None, valid_request=True):
        """Sends one request; checks the request and the answer against the
        document; returns the answer (its body as bytes in `.content`)."""
        headers = dict(headers or {})
        if key:
            headers["authorization"] = f"Bearer {key}"
        data = None
        if body is not None:
            if isinstance(body, bytes):
                data = body
                content_type = content_type or "application/octet-stream"
            else:
                data = json.dumps(body).encode()
                content_type = content_type or "application/json"
            headers["content-type"] = content_type
        request = self.http.build_request(method, concrete, content=data, headers=headers, params=params)
        response = self.http.send(request, stream=True)
        try:
            if stream_until is None:
                content = response.read()
            else:
                content = b""
                for chunk in response.iter_bytes():
                    content += chunk
                    if stream_until(content):
                        break
        finally:
            response.close()
        operation = self.operation(method, path)
        self.called.add(operation)
        where = f"{operation} ({method} {concrete} -> {response.status_code})"
        if expect is not None and response.status_code != expect:
            self.failures.append(f"{where}: expected {expect}: {content[:500]!r}")
        mock_request = MockRequest(
            self.url, method.lower(), urlsplit(str(request.url)).path, path_pattern=path,
            args=dict(params or {}), view_args=path_parameters(path, concrete), headers=headers, data=data,
            content_type=content_type or "application/json",
        )
        media = response.headers.get("content-type", "").split(";")[0].strip()
        mock_response = MockResponse(content, status_code=response.status_code,
                                     headers=dict(response.headers), content_type=media)
        errors = list(self.api.iter_request_errors(mock_request)) if valid_request else []
        if errors:
            self.failures.append(f"{where}: request: {'; '.join(describe(e) for e in errors)}")
        if media == "application/wasm":
            # openapi-core would compare the bytes with `type: string`: the
            # documented media type and the component's magic are checked.
            documented = self.document["paths"][path][method.lower()]["responses"].get(str(response.status_code), {})
            if media not in documented.get("content", {}) or not content.startswith(b"\0asm"):
                self.failures.append(f"{where}: a component answer the document does not describe")
            print(f"checked {where}")
            response._content = content
            return response
        errors = list(self.api.iter_response_errors(mock_request, mock_response))
        if errors:
            self.failures.append(f"{where}: answer {content[:300]!r}: {'; '.join(describe(e) for e in errors)}")
        print(f"checked {where}")
        response._content = content
        return response


def path_parameters(pattern, concrete):
    """The path parameters of `concrete`, a path matching `pattern`."""
    parameters = {}
    for name, value in zip(pattern.split("/"), concrete.split("/")):
        if name.startswith("{") and name.endswith("}"):
            parameters[name[1:-1]] = value
    return parameters


def describe(error):
    text = str(error)
    cause = error.__cause__
    while cause is not None:
        text += f" <- {cause}"
        details = getattr(cause, "schema_errors", None)
        if details:
            text += " [" + " | ".join(f"{list(e.absolute_path)}: {e.message}" for e in details) + "]"
        cause = cause.__cause__
    return text


def ended(marker):
    return lambda content: marker.encode() in content


def wait_idle(checker, key, session):
    deadline = time.time() + 60
    while time.time() < deadline:
        answer = checker.http.get(f"/v1/sessions/{session}", headers={"authorization": f"Bearer {key}"})
        if answer.status_code == 200 and answer.json()["status"] == "idle":
            return answer.json()
        time.sleep(0.1)
    raise SystemExit(f"session {session} did not become idle")


def exercise(checker, admin, wasm):
    c = checker.call
    c("GET", "/healthz", "/healthz", expect=200)
    c("GET", "/metrics", "/metrics", expect=200)
    # The operator's routes.
    c("PUT", "/v1/admin/tenants/{tenant}", "/v1/admin/tenants/acme", admin, {}, expect=201)
    c("PUT", "/v1/admin/tenants/{tenant}", "/v1/admin/tenants/short-lived", admin, {"limits": {"max_sessions": 5}},
      expect=201)
    c("GET", "/v1/admin/tenants", "/v1/admin/tenants", admin, expect=200)
    c("GET", "/v1/admin/tenants/{tenant}", "/v1/admin/tenants/acme", admin, expect=200)
    c("PUT", "/v1/admin/tenants/{tenant}/limits", "/v1/admin/tenants/acme/limits", admin, {"max_sessions": 100},
      expect=200)
    c("GET", "/v1/admin/tenants/{tenant}/limits", "/v1/admin/tenants/acme/limits", admin, expect=200)
    key = c("POST", "/v1/admin/keys", "/v1/admin/keys", admin, {"tenant": "acme", "name": "ci"}, expect=201).json()
    spare = c("POST", "/v1/admin/keys", "/v1/admin/keys", admin, {"tenant": "acme"}, expect=201).json()
    c("GET", "/v1/admin/keys", "/v1/admin/keys", admin, params={"tenant": "acme"}, expect=200)
    c("DELETE", "/v1/admin/keys/{key}", f"/v1/admin/keys/{spare['hash']}", admin, expect=200)
    c("DELETE", "/v1/admin/tenants/{tenant}", "/v1/admin/tenants/short-lived", admin, expect=200)
    key = key["key"]

    # Agents.
    # openapi-core compares a binary body (bytes) with `type: string` and
    # finds it no string: the component upload's request is not checked.
    uploaded = c("PUT", "/v1/agents/{agent_id}", "/v1/agents/tools", key, wasm, content_type="application/wasm",
                 expect=201, valid_request=False).json()
    version = uploaded["version"]
    worker = c("PUT", "/v1/agents/{agent_id}", "/v1/agents/tools", key, {"url": "http://127.0.0.1:9/decide"},
               params={"activate": "false"}, expect=201).json()
    c("GET", "/v1/agents", "/v1/agents", key, expect=200)
    c("GET", "/v1/agents/{agent_id}/versions/{version}", f"/v1/agents/tools/versions/{version}", key, expect=200)
    c("GET", "/v1/agents/{agent_id}", "/v1/agents/tools", key, expect=200)
    c("PUT", "/v1/agents/{agent_id}/current", "/v1/agents/tools/current", key, {"version": version}, expect=200)
    inactive = [v["version"] for v in worker["versions"] if not v["active"]]
    c("DELETE", "/v1/agents/{agent_id}/versions/{version}", f"/v1/agents/tools/versions/{inactive[-1]}", key,
      expect=200)
    c("PUT", "/v1/agents/{agent_id}", "/v1/agents/gone", key, {"url": "http://127.0.0.1:9/decide"}, expect=201)
    c("DELETE", "/v1/agents/{agent_id}", "/v1/agents/gone", key, expect=204)

    # Sessions: a tool turn, then everything that reads it.
    message = {"type": "client.message", "agent_id": "tools", "message": {"role": "user", "content": ADD}}
    c("POST", "/v1/sessions/{session_id}/input", "/v1/sessions/s1/input", key, message, expect=202)
    wait_idle(checker, key, "s1")
    c("GET", "/v1/sessions/{session_id}", "/v1/sessions/s1", key, expect=200)
    streamed = dict(message, stream=True)
    c("POST", "/v1/sessions/{session_id}/input", "/v1/sessions/s1/input", key, streamed, expect=200)
    c("GET", "/v1/sessions", "/v1/sessions", key, params={"limit": "10", "agent": "tools"}, expect=200)
    c("GET", "/v1/sessions/{session_id}/decisions", "/v1/sessions/s1/decisions", key, expect=200)
    c("GET", "/v1/sessions/{session_id}/events", "/v1/sessions/s1/events", key, params={"after": "0"},
      expect=200, stream_until=ended("turn.done"))
    c("PUT", "/v1/sessions/{session_id}/budget", "/v1/sessions/s1/budget", key, {"budget": "1.5"}, expect=200)
    c("POST", "/v1/sessions/{session_id}/cancel", "/v1/sessions/s1/cancel", key, expect=200)
    c("GET", "/v1/usage", "/v1/usage", key, expect=200)
    c("POST", "/v1/tokens", "/v1/tokens", key, {"identity": {"id": "ada"}, "ttl_secs": 60}, expect=200)
    c("POST", "/v1/agents/{agent_id}/replay", "/v1/agents/tools/replay", key, {"version": version}, expect=200)
    # A session without state: `state` is null in its snapshot.
    action = {"type": "client.action", "agent_id": "tools", "name": "nothing"}
    c("POST", "/v1/sessions/{session_id}/input", "/v1/sessions/stateless/input", key, action)
    wait_idle(checker, key, "stateless")
    c("GET", "/v1/sessions/{session_id}", "/v1/sessions/stateless", key, expect=200)

    # The frontends.
    agui = {"threadId": "agui-1", "runId": "run-1", "messages": [{"id": "u1", "role": "user", "content": ADD}]}
    c("POST", "/v1/agents/{agent_id}/ag-ui", "/v1/agents/tools/ag-ui", key, agui, expect=200)
    chat = {"id": "chat-1", "messages": [{"id": "m1", "role": "user", "parts": [{"type": "text", "text": ADD}]}]}
    c("POST", "/v1/agents/{agent_id}/ai-sdk", "/v1/agents/tools/ai-sdk", key, chat, expect=200)
    c("GET", "/v1/agents/{agent_id}/ai-sdk/{chat_id}/stream", "/v1/agents/tools/ai-sdk/chat-1/stream", key,
      expect=204)

    # The agent as an MCP server: a session opened, no stream outside
    # calls, the session ended.
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "check", "version": "1"}}}
    opened = c("POST", "/v1/agents/{agent_id}/mcp", "/v1/agents/tools/mcp", key, initialize, expect=200,
               headers={"accept": "application/json, text/event-stream"})
    mcp = {"mcp-session-id": opened.headers.get("mcp-session-id", ""), "mcp-protocol-version": "2025-06-18"}
    c("GET", "/v1/agents/{agent_id}/mcp", "/v1/agents/tools/mcp", key, expect=405, headers=mcp)
    c("DELETE", "/v1/agents/{agent_id}/mcp", "/v1/agents/tools/mcp", key, expect=204, headers=mcp)

    # MCP servers the tenant's agents may use: a loopback URL is refused
    # (the operator allows none here), so there is none to read or remove.
    c("PUT", "/v1/mcp-servers/{name}", "/v1/mcp-servers/local", key, {"url": "http://127.0.0.1:9/mcp"}, expect=400)
    c("GET", "/v1/mcp-servers", "/v1/mcp-servers", key, expect=200)
    c("GET", "/v1/mcp-servers/{name}", "/v1/mcp-servers/local", key, expect=404)
    c("DELETE", "/v1/mcp-servers/{name}", "/v1/mcp-servers/local", key, expect=404)

    # Refusals answer the error body the document describes.
    c("GET", "/v1/sessions/{session_id}", "/v1/sessions/nobody", key, expect=404)
    c("GET", "/v1/sessions", "/v1/sessions", "subs_not_a_key_at_all", expect=401)
    c("POST", "/v1/sessions/{session_id}/input", "/v1/sessions/s1/input", key, {"type": "client.message"}, expect=400,
      valid_request=False)
    return key


def generated_client(document, work, url, key):
    """Generates a client with openapi-python-client; uses it for a turn."""
    spec = work / "openapi.json"
    spec.write_text(json.dumps(document))
    out = work / "generated"
    # The generator sends binary bodies only as application/octet-stream:
    # the component upload's media type is mapped to it (docs/api.md).
    config = work / "openapi-python-client.yaml"
    config.write_text("content_type_overrides:\n  application/wasm: application/octet-stream\n")
    bin_dir = Path(sys.executable).parent
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    run = subprocess.run(
        [str(bin_dir / "openapi-python-client"), "generate", "--path", str(spec), "--output-path", str(out),
         "--overwrite", "--meta", "none", "--config", str(config)],
        capture_output=True, text=True, env=env,
    )
    print(run.stdout)
    if run.returncode != 0 or "Warning" in run.stdout or "Warning" in run.stderr:
        raise SystemExit(f"openapi-python-client: exit {run.returncode}\n{run.stdout}\n{run.stderr}")
    sys.path.insert(0, str(out.parent))
    package = importlib.import_module(out.name)
    client_module = importlib.import_module(f"{out.name}.client")
    send_input = importlib.import_module(f"{out.name}.api.sessions.send_input")
    get_session = importlib.import_module(f"{out.name}.api.sessions.get_session")
    models = importlib.import_module(f"{out.name}.models")
    client = client_module.AuthenticatedClient(base_url=url, token=key, raise_on_unexpected_status=True)
    body = models.PostedInputType0.from_dict(
        {"type": "client.message", "agent_id": "tools", "message": {"role": "user", "content": ADD}})
    accepted = send_input.sync("generated", client=client, body=body)
    if not isinstance(accepted, models.InputAccepted) or accepted.session_id != "generated":
        raise SystemExit(f"the generated client's sendInput answered {accepted!r}")
    deadline = time.time() + 60
    while True:
        view = get_session.sync("generated", client=client)
        if not isinstance(view, models.SessionView):
            raise SystemExit(f"the generated client's getSession answered {view!r}")
        if view.status == "idle" or time.time() > deadline:
            break
        time.sleep(0.1)
    texts = [m.to_dict() for m in view.messages]
    if view.status != "idle" or not any("sum" in json.dumps(t) for t in texts):
        raise SystemExit(f"the generated client's snapshot: {view.status} {texts}")
    print(f"generated client ({package.__name__}): sendInput, then getSession: {len(texts)} messages")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--admin-key", required=True)
    parser.add_argument("--wasm", required=True)
    parser.add_argument("--work", required=True)
    args = parser.parse_args()
    document = httpx.get(f"{args.url}/v1/openapi.json", timeout=30).json()
    errors = list(OpenAPIV31SpecValidator(document).iter_errors())
    if errors:
        raise SystemExit(f"{len(errors)} errors in the OpenAPI document:\n" +
                         "\n".join(f"{list(e.absolute_path)}: {e.message}" for e in errors[:50]))
    print("the OpenAPI document is valid OpenAPI 3.1")
    checker = Checker(args.url, document)
    key = exercise(checker, args.admin_key, Path(args.wasm).read_bytes())
    every = {op["operationId"] for item in document["paths"].values() for op in item.values()}
    missed = sorted(every - checker.called)
    if missed:
        checker.failures.append(f"operations never called: {', '.join(missed)}")
    if checker.failures:
        raise SystemExit("\n".join(checker.failures))
    print(f"every operation ({len(every)}) answered as the document says")
    generated_client(document, Path(args.work), args.url, key)


if __name__ == "__main__":
    main()
