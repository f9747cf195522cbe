"""The MCP server the tests call: the Python SDK's server (FastMCP, named
MCPServer since mcp 2) over Streamable HTTP on 127.0.0.1.

    python server.py PORT [--mode MODE] [--stdio]

With ``--stdio`` it speaks over standard input and output instead (PORT
is ignored).

Modes change one thing, for the bad-input tests:

- ``normal``: the tools below.
- ``collide``: two more tools whose offered names collide (``a.b``, ``a_b``).
- ``eras``: two more tools, ``era`` (the revision of the request calling
  it) and ``region`` (an argument the client must mirror into the
  ``Mcp-Param-Region`` header, which the SDK checks; it answers what it
  got). The SDK serves both eras: the stateless revision (2026-07-28) and
  the ``initialize`` handshake.
- ``legacy``: the ``eras`` tools behind a front that refuses modern
  requests the way a handshake-only server does (400, a JSON-RPC error
  outside the modern range), so clients fall back to ``initialize``.
"""

import argparse
import asyncio
import json
from typing import Annotated

from pydantic import BaseModel, Field

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError


class Sum(BaseModel):
    """The result of ``add``."""

    sum: float


def build(mode: str) -> MCPServer:
    server = MCPServer("subs-test")

    @server.tool(description="Adds two numbers.")
    def add(a: float, b: float) -> Sum:
        return Sum(sum=a + b)

    @server.tool(description="Echoes its text.", structured_output=False)
    def echo(text: str) -> str:
        return f"echo: {text}"

    @server.tool(description="Always fails.", structured_output=False)
    def fail(reason: str = "no reason") -> str:
        raise ToolError(f"failing on purpose: {reason}")

    @server.tool(description="Never answers.", structured_output=False)
    async def hang() -> str:
        await asyncio.sleep(3600)
        return "never"

    @server.tool(description="Answers with a text of `size` bytes.", structured_output=False)
    def big(size: Annotated[int, Field(ge=0, le=64_000_000)]) -> str:
        return "x" * size

    @server.tool(description="Reports progress, then answers.", structured_output=False)
    async def slow(steps: int, ctx: Context) -> str:
        for step in range(steps):
            await ctx.report_progress(step + 1, steps, f"step {step + 1}")
            await asyncio.sleep(0.05)
        return f"done after {steps} steps"

    if mode in ("eras", "legacy"):

        @server.tool(description="The protocol revision of this request.", structured_output=False)
        def era(ctx: Context) -> str:
            return str(ctx.protocol_version)

        @server.tool(description="Answers the region it was called for.", structured_output=False)
        def region(region: Annotated[str, Field(json_schema_extra={"x-mcp-header": "Region"})]) -> str:
            return f"region: {region}"

    if mode == "collide":

        @server.tool(name="a.b", description="Collides with a_b.", structured_output=False)
        def a_dot_b() -> str:
            return "a.b"

        @server.tool(name="a_b", description="Collides with a.b.", structured_output=False)
        def a_under_b() -> str:
            return "a_b"

    return server


MODERN = ("2026-07-28",)


def handshake_only(app):
    """`app` as a server of the handshake era alone answers a modern request:
    400 and a JSON-RPC error of its own (-32000), as the 1.x SDKs do."""

    async def front(scope, receive, send):
        if scope["type"] == "http":
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
            if headers.get("mcp-protocol-version") in MODERN:
                body = json.dumps(
                    {
                        "jsonrpc": "2.0",
                        "id": "server-error",
                        "error": {"code": -32000, "message": "Bad Request: Unsupported protocol version"},
                    }
                ).encode()
                await send(
                    {
                        "type": "http.response.start",
                        "status": 400,
                        "headers": [(b"content-type", b"application/json")],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await app(scope, receive, send)

    return front


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("port", type=int)
    parser.add_argument("--mode", default="normal", choices=["normal", "collide", "eras", "legacy"])
    parser.add_argument("--stdio", action="store_true")
    args = parser.parse_args()
    if args.stdio:
        build(args.mode).run(transport="stdio")
    elif args.mode == "legacy":
        import uvicorn

        server = build(args.mode)
        app = handshake_only(server.streamable_http_app(stateless_http=False))
        uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")
    else:
        build(args.mode).run(transport="streamable-http", host="127.0.0.1", port=args.port, stateless_http=False)


if __name__ == "__main__":
    main()
