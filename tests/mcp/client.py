"""Calls subs agents through their MCP endpoints with the Python SDK's
``Client`` at the stateless revision (2026-07-28), as a modern desktop
assistant or IDE would, and prints a JSON summary for
engine/cli/tests/all/mcp_endpoint.rs to assert on.

    python client.py <base URL> <reply agent> <approver agent> <refund message>

Scenarios, each with a client of its own:

- discover: ``mode="auto"`` (the SDK probes with ``server/discover``) picks
  the stateless revision;
- reply: tools/list, then a call with progress;
- elicit: a client with the elicitation capability approves the refund
  the approver asks about (an ``input_required`` result, answered by the
  SDK's retry);
- resume: a client without it gets the open interrupt and a session id,
  and answers with a second call naming that session.
"""

import asyncio
import json
import sys

from mcp import Client, types

MODERN = "2026-07-28"


def texts(result: types.CallToolResult) -> list[str]:
    return [c.text for c in result.content if isinstance(c, types.TextContent)]


async def main() -> None:
    base, reply_agent, approver, refund = sys.argv[1:5]
    url = lambda agent: f"{base}/v1/agents/{agent}/mcp"  # noqa: E731
    summary: dict = {}

    async with Client(url(reply_agent), mode="auto") as client:
        summary["discover"] = {
            "protocol": client.protocol_version,
            "server": client.server_info.model_dump() if client.server_info else None,
        }

    async with Client(url(reply_agent), mode=MODERN) as client:
        progress: list[dict] = []

        async def on_progress(done: float, total: float | None, message: str | None) -> None:
            progress.append({"progress": done, "message": message})

        tools = await client.list_tools()
        result = await client.call_tool(reply_agent, {"message": "hello"}, progress_callback=on_progress)
        summary["reply"] = {
            "protocol": client.protocol_version,
            "server": client.server_info.model_dump() if client.server_info else None,
            "tools": [t.model_dump(by_alias=True, exclude_none=True) for t in tools.tools],
            "text": texts(result),
            "isError": result.is_error,
            "meta": result.meta,
            "progress": progress,
        }

    asked: list[dict] = []

    async def approve(context, params):
        asked.append(params.model_dump(by_alias=True, exclude_none=True))
        return types.ElicitResult(action="accept", content={"approved": True})

    async with Client(url(approver), mode=MODERN, elicitation_callback=approve) as client:
        result = await client.call_tool(approver, {"message": refund})
        summary["elicit"] = {"asked": asked, "text": texts(result), "isError": result.is_error, "meta": result.meta}

    async with Client(url(approver), mode=MODERN) as client:
        first = await client.call_tool(approver, {"message": refund})
        session_id = first.structured_content["session_id"]
        second = await client.call_tool(approver, {"message": json.dumps({"approved": True}), "session_id": session_id})
        summary["resume"] = {
            "first": {"text": texts(first), "structured": first.structured_content, "isError": first.is_error},
            "second": {"text": texts(second), "isError": second.is_error, "meta": second.meta},
        }

    print(json.dumps(summary))


if __name__ == "__main__":
    asyncio.run(main())
