"""The MCP server the tests call: the Python SDK's server (FastMCP, named
MCPServer since mcp 2) over Streamable HTTP on 127.0.0.1.

    python server.py PORT [--mode MODE] [--stdio]

With ``--stdio`` it speaks over standard input and output instead (PORT
is ignored).

Modes change one thing, for the bad-input tests:

- ``normal``: the tools below.
- ``collide``: two more tools whose offered names collide (``a.b``, ``a_b``).
"""

import argparse
import asyncio
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

    if mode == "collide":

        @server.tool(name="a.b", description="Collides with a_b.", structured_output=False)
        def a_dot_b() -> str:
            return "a.b"

        @server.tool(name="a_b", description="Collides with a.b.", structured_output=False)
        def a_under_b() -> str:
            return "a_b"

    return server


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("port", type=int)
    parser.add_argument("--mode", default="normal", choices=["normal", "collide"])
    parser.add_argument("--stdio", action="store_true")
    args = parser.parse_args()
    if args.stdio:
        build(args.mode).run(transport="stdio")
    else:
        build(args.mode).run(transport="streamable-http", host="127.0.0.1", port=args.port, stateless_http=False)


if __name__ == "__main__":
    main()
