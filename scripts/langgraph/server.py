"""LangGraph side of the subs-vs-LangGraph HTTP benchmark.

One process, one event loop (uvloop), uvicorn + httptools + Starlette. Each
request runs LangGraph's standard ReAct agent for one turn of a thread, with an
AsyncSqliteSaver checkpointer (WAL, synchronous=FULL) written with
`durability="sync"` (each step's checkpoint is written before the next step
runs, as subs commits each step before acting on it; LangGraph's default,
"async", writes it while the next step runs) and a scripted offline chat
model that follows the rules of subs' offline model. See README.md.

    python server.py --db PATH [--host 127.0.0.1] [--port 0]
                     [--agent create_agent|create_react_agent]

Prints `langgraph listening on http://HOST:PORT` once it accepts connections.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import math
import os
import re
import socket
import sys
import warnings
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

# No tracing: nothing here may reach the network, and tracing is not part of
# what the benchmark measures.
for _var in ("LANGSMITH_TRACING", "LANGCHAIN_TRACING_V2", "LANGCHAIN_TRACING"):
    os.environ.pop(_var, None)

import aiosqlite
import uvicorn
import uvloop
from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    HumanMessage,
    ToolMessage,
)
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.tools import tool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

# ---------------------------------------------------------------------------
# The tool


def _number(x: float) -> int | float:
    """`3.0` -> `3` (as subs prints whole sums), anything else unchanged."""
    if isinstance(x, float) and math.isfinite(x) and x.is_integer() and abs(x) < 2**53:
        return int(x)
    return x


@tool
async def add(a: float, b: float) -> str:
    """Add two numbers and return their sum."""
    return json.dumps({"sum": _number(a + b)}, separators=(",", ":"))


# ---------------------------------------------------------------------------
# The scripted model: subs' offline model rules (engine/engine/src/model/offline.rs)

# `use tool` as whole words, any case, then whitespace, then the name.
_USE_TOOL = re.compile(r"(?<![\w-])use\s+tool(?![\w-])\s+", re.IGNORECASE)
# A run of letters, digits, `_` and `-`, with `.` or `:` allowed inside.
_NAME = re.compile(r"[A-Za-z0-9_-]+(?:[.:][A-Za-z0-9_-]+)*")
_WITH = re.compile(r"\s*with(?![\w-])\s*", re.IGNORECASE)

MAX_TEXT_PIECE = 16  # longest streamed text piece, as subs
ARGUMENT_PIECE = 8  # argument characters per tool-call chunk, as subs


def _json_object_end(text: str, start: int) -> int | None:
    """Index just past the `}` matching the `{` at `start` (braces inside
    JSON strings skipped), or None if it is never closed."""
    depth = 0
    in_string = False
    escaped = False
    for i in range(start, len(text)):
        c = text[i]
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return i + 1
    return None


def tool_requests(text: str) -> list[tuple[str, Any]]:
    """Every `use tool <name> [with <json object>]` in `text`, in order, as
    (name, args). Args that are not a JSON object are kept as raw text (the
    tool's argument validation then reports them, as subs' `malformed`)."""
    found: list[tuple[str, Any]] = []
    pos = 0
    while m := _USE_TOOL.search(text, pos):
        name_m = _NAME.match(text, m.end())
        if not name_m:
            pos = m.end()
            continue
        name, pos = name_m.group(), name_m.end()
        args: Any = {}
        with_m = _WITH.match(text, pos)
        if with_m and with_m.end() < len(text):
            start = with_m.end()
            if text[start] == "{":
                end = _json_object_end(text, start)
                raw = text[start:end] if end is not None else text[start:]
                pos = end if end is not None else len(text)
            else:
                end = text.find("\n", start)
                raw = text[start:] if end < 0 else text[start:end]
                pos = len(text) if end < 0 else end
            try:
                args = json.loads(raw)
            except ValueError:
                args = raw
            if not isinstance(args, dict):
                args = raw
        found.append((name, args))
    return found


def _text(message: BaseMessage) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    return "".join(
        b if isinstance(b, str) else b.get("text", "") for b in content if isinstance(b, (str, dict))
    )


def _call_id(messages: Sequence[BaseMessage], index: int) -> str:
    # Only the end of the conversation is hashed (the model looks at the last
    # messages only); the message count makes ids distinct across turns.
    h = hashlib.blake2b(digest_size=8)
    h.update(f"{len(messages)}\0{messages[-1].type}\0{index}\0".encode())
    h.update(_text(messages[-1]).encode())
    return "call_" + h.hexdigest()


def _sentence(who: str, result: str) -> str:
    result = result.rstrip()
    if not result:
        return f"{who} returned nothing."
    if result.endswith((".", "!", "?")):
        return f"{who} returned {result}"
    return f"{who} returned {result}."


def _echo(text: str) -> str:
    return f"You said: {text}" if text else "You said nothing I can read."


GREETING = (
    "Hello! I am the scripted offline model. I repeat what you say; "
    "write `use tool <name> with {...}` to have me call a tool."
)


def scripted_reply(messages: Sequence[BaseMessage], offered: Sequence[str]) -> tuple[str, list[dict]]:
    """(text, tool calls) the offline model answers to `messages`, looking
    only at the last messages."""
    if not messages:
        return GREETING, []
    last = messages[-1]
    if isinstance(last, HumanMessage):
        text = _text(last)
        wanted = tool_requests(text)
        if not wanted:
            return _echo(text), []
        calls, missing = [], []
        for name, args in wanted:
            if name in offered:
                calls.append((name, args))
            elif name not in missing:
                missing.append(name)
        notice = ""
        if missing:
            quoted = [f'"{n}"' for n in missing]
            notice = (
                f"The tool {quoted[0]} is not available."
                if len(quoted) == 1
                else f"The tools {', '.join(quoted)} are not available."
            )
        if not calls:
            available = f"Available tools: {', '.join(offered)}." if offered else "No tools are available."
            return f"{notice} {available}", []
        return notice, [
            {"name": name, "args": args, "id": _call_id(messages, i)} for i, (name, args) in enumerate(calls)
        ]
    if isinstance(last, ToolMessage):
        # The trailing tool messages, and the AI message whose calls they answer.
        first = len(messages) - 1
        while first > 0 and isinstance(messages[first - 1], ToolMessage):
            first -= 1
        results = messages[first:]
        calls = messages[first - 1].tool_calls if first > 0 and isinstance(messages[first - 1], AIMessage) else []
        by_id = {m.tool_call_id: m for m in results}
        sentences = [_sentence(c["name"], _text(by_id[c["id"]])) for c in calls if c["id"] in by_id]
        known = {c["id"] for c in calls}
        sentences += [
            _sentence(f"The tool call {m.tool_call_id}", _text(m)) for m in results if m.tool_call_id not in known
        ]
        return " ".join(sentences), []
    for m in reversed(messages):
        if isinstance(m, HumanMessage):
            return _echo(_text(m)), []
    return GREETING, []


def _pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def text_pieces(text: str) -> list[str]:
    """A word and the whitespace after it per piece, long words cut at
    MAX_TEXT_PIECE characters; the pieces concatenate to `text`."""
    return [p for w in re.findall(r"\s*\S+\s*|\s+", text) for p in _pieces(w, MAX_TEXT_PIECE)]


class ScriptedChatModel(BaseChatModel):
    """A deterministic chat model following subs' offline model rules.

    Supports `bind_tools` (tools converted to OpenAI tool schemas, as provider
    integrations do) and streams: text a word at a time, then each tool call
    as a chunk with its id and name followed by chunks of its arguments,
    yielding to the event loop between chunks (as subs' offline model does)."""

    @property
    def _llm_type(self) -> str:
        return "scripted-offline"

    def bind_tools(self, tools: Sequence[Any], *, tool_choice: Any = None, **kwargs: Any):
        formatted = [convert_to_openai_tool(t) for t in tools]
        return self.bind(tools=formatted, **kwargs)

    @staticmethod
    def _offered(kwargs: dict) -> list[str]:
        return [t["function"]["name"] for t in kwargs.get("tools") or ()]

    def _reply_message(self, messages: list[BaseMessage], **kwargs: Any) -> AIMessage:
        text, calls = scripted_reply(messages, self._offered(kwargs))
        valid = [c for c in calls if isinstance(c["args"], dict)]
        invalid = [
            {**c, "error": "arguments are not a JSON object"} for c in calls if not isinstance(c["args"], dict)
        ]
        return AIMessage(content=text, tool_calls=valid, invalid_tool_calls=invalid)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=self._reply_message(messages, **kwargs))])

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        # Overridden so the default does not hop to a thread pool.
        return self._generate(messages, stop, **kwargs)

    def _chunks(self, messages: list[BaseMessage], kwargs: dict) -> Iterator[AIMessageChunk]:
        text, calls = scripted_reply(messages, self._offered(kwargs))
        for piece in text_pieces(text):
            yield AIMessageChunk(content=piece)
        for index, call in enumerate(calls):
            args = call["args"]
            args_text = json.dumps(args, separators=(",", ":")) if isinstance(args, dict) else str(args)
            yield AIMessageChunk(
                content="",
                tool_call_chunks=[{"name": call["name"], "args": "", "id": call["id"], "index": index}],
            )
            for piece in _pieces(args_text, ARGUMENT_PIECE):
                yield AIMessageChunk(
                    content="",
                    tool_call_chunks=[{"name": None, "args": piece, "id": None, "index": index}],
                )

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        for chunk in self._chunks(messages, kwargs):
            yield ChatGenerationChunk(message=chunk)

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        # langchain-core reports each chunk to the callbacks (on_llm_new_token),
        # which is how stream_mode="messages" sees them.
        first = True
        for chunk in self._chunks(messages, kwargs):
            if not first:
                await asyncio.sleep(0)
            first = False
            yield ChatGenerationChunk(message=chunk)


# ---------------------------------------------------------------------------
# The graph


def build_agent(kind: str, checkpointer: AsyncSqliteSaver):
    model = ScriptedChatModel()
    if kind == "create_agent":
        # LangGraph 1.x's docs name langchain's create_agent as the standard
        # ReAct agent (it runs on LangGraph; create_react_agent is deprecated).
        from langchain.agents import create_agent

        return create_agent(model, tools=[add], checkpointer=checkpointer)
    if kind == "create_react_agent":
        from langgraph.prebuilt import create_react_agent
        from langgraph.warnings import LangGraphDeprecatedSinceV10

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", LangGraphDeprecatedSinceV10)
            return create_react_agent(model, tools=[add], checkpointer=checkpointer)
    raise ValueError(f"unknown agent constructor {kind!r}")


async def open_checkpointer(path: str) -> tuple[aiosqlite.Connection, AsyncSqliteSaver]:
    conn = await aiosqlite.connect(path)
    saver = AsyncSqliteSaver(conn)
    await saver.setup()  # creates the tables, sets journal_mode=WAL
    await conn.execute("PRAGMA synchronous=FULL")
    async with conn.execute("PRAGMA journal_mode") as cur:
        journal = (await cur.fetchone())[0]
    async with conn.execute("PRAGMA synchronous") as cur:
        synchronous = (await cur.fetchone())[0]
    if str(journal).lower() != "wal" or synchronous != 2:
        raise SystemExit(f"sqlite pragmas not in effect: journal_mode={journal} synchronous={synchronous} (want wal, 2=FULL)")
    return conn, saver


# ---------------------------------------------------------------------------
# HTTP


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def sse(event: str, data: Any) -> bytes:
    return f"event: {event}\ndata: {_dumps(data)}\n\n".encode()


def message_event(message: BaseMessage, meta: dict) -> dict:
    """Something small and meaningful about one `messages` stream item."""
    out: dict[str, Any] = {"node": meta.get("langgraph_node"), "type": message.type}
    if isinstance(message, ToolMessage):
        out["name"] = message.name
    text = _text(message)
    if text:
        out["text"] = text
    if isinstance(message, AIMessageChunk) and message.tool_call_chunks:
        out["tool_calls"] = [
            {k: c.get(k) for k in ("index", "id", "name", "args") if c.get(k) is not None}
            for c in message.tool_call_chunks
        ]
    elif isinstance(message, AIMessage) and message.tool_calls:
        out["tool_calls"] = [{"id": c["id"], "name": c["name"]} for c in message.tool_calls]
    return out


class ThreadLocks:
    """One turn at a time per thread id, so a thread's checkpoints stay linear."""

    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}

    def acquire_ref(self, thread_id: str) -> asyncio.Lock:
        lock, users = self._locks.get(thread_id, (None, 0))
        if lock is None:
            lock = asyncio.Lock()
        self._locks[thread_id] = (lock, users + 1)
        return lock

    def release(self, thread_id: str) -> None:
        lock, users = self._locks[thread_id]
        if users <= 1:
            del self._locks[thread_id]
        else:
            self._locks[thread_id] = (lock, users - 1)


def make_app(agent) -> Starlette:
    locks = ThreadLocks()

    async def run_turn(thread_id: str, text: str) -> AsyncIterator[bytes]:
        config = {"configurable": {"thread_id": thread_id}}
        lock = locks.acquire_ref(thread_id)
        answer = ""
        try:
            async with lock:
                async for mode, item in agent.astream(
                    {"messages": [HumanMessage(content=text)]},
                    config,
                    stream_mode=["messages", "updates"],
                    durability="sync",
                ):
                    if mode == "messages":
                        message, meta = item
                        yield sse("messages", message_event(message, meta))
                    elif mode == "updates":
                        nodes = []
                        for node, update in (item or {}).items():
                            nodes.append(node)
                            msgs = update.get("messages") if isinstance(update, dict) else None
                            for m in msgs or ():
                                if isinstance(m, AIMessage):
                                    answer = _text(m)
                        yield sse("updates", {"nodes": nodes})
        except Exception as e:  # noqa: BLE001 - reported to the client
            yield sse("error", {"message": f"{type(e).__name__}: {e}"})
            return
        finally:
            locks.release(thread_id)
        yield sse("end", {"answer": answer})

    async def stream(request: Request) -> Response:
        thread_id = request.path_params["thread_id"]
        try:
            body = await request.json()
            text = body["message"]
            if not isinstance(text, str):
                raise TypeError("message must be a string")
        except Exception as e:  # noqa: BLE001
            return JSONResponse({"error": f"expected a JSON body {{\"message\": \"...\"}}: {e}"}, status_code=400)
        return StreamingResponse(
            run_turn(thread_id, text),
            media_type="text/event-stream",
            headers={"cache-control": "no-cache"},
        )

    async def healthz(request: Request) -> Response:
        return PlainTextResponse("ok")

    return Starlette(
        routes=[
            Route("/threads/{thread_id}/stream", stream, methods=["POST"]),
            Route("/healthz", healthz, methods=["GET"]),
        ]
    )


async def main(args: argparse.Namespace) -> None:
    conn, saver = await open_checkpointer(args.db)
    try:
        agent = build_agent(args.agent, saver)
        family = socket.AF_INET6 if ":" in args.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((args.host, args.port))
        sock.listen(1024)
        sock.setblocking(False)
        port = sock.getsockname()[1]
        config = uvicorn.Config(
            make_app(agent),
            loop="none",  # we run uvloop ourselves (uvloop.run below)
            http="httptools",
            ws="none",
            lifespan="off",
            log_level="warning",
            access_log=False,
            backlog=1024,
        )
        server = uvicorn.Server(config)
        serving = asyncio.ensure_future(server.serve(sockets=[sock]))
        while not server.started:
            if serving.done():
                serving.result()  # startup failed: raise its error
                raise SystemExit("uvicorn stopped during startup")
            await asyncio.sleep(0.005)
        host = f"[{args.host}]" if family == socket.AF_INET6 else args.host
        print(f"langgraph listening on http://{host}:{port}", flush=True)
        await serving
    finally:
        await conn.close()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--db", required=True, help="SQLite checkpoint file (created if missing)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0, help="0 picks a free port")
    p.add_argument(
        "--agent",
        choices=["create_agent", "create_react_agent"],
        default="create_agent",
        help="agent constructor: langchain.agents.create_agent (default, LangGraph 1.x's standard) "
        "or the deprecated langgraph.prebuilt.create_react_agent",
    )
    return p.parse_args(argv)


if __name__ == "__main__":
    uvloop.run(main(parse_args()))
