"""Smoke check and rough timing of server.py (stdlib only; run it with any python 3.10+).

    python scripts/langgraph/smoke.py [--python VENV_PYTHON] [--agent create_agent]
                                      [--turns 200] [--c64-turns 1280]

Starts server.py on a fresh database in a temporary directory under target/,
checks the two scripted answers, then drives it over HTTP/1.1 keep-alive:
sequential turns on one connection (concurrency 1) and 64 asyncio workers
with one connection each. Threads run 10 turns, alternating a tool turn
(`use tool add with {...}`, two model calls and a tool call) and an echo turn
(one model call). Reports p50/p99 per turn, turns/s and the server's CPU time
per turn (utime+stime from /proc/PID/stat).
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
TURNS_PER_THREAD = 10
TICK = os.sysconf("SC_CLK_TCK")


def turn_text(i: int) -> str:
    if i % 2 == 0:
        return 'use tool add with {"a": %d, "b": 2}' % (i + 1)
    return "hello number %d" % i


def expected(i: int) -> str:
    if i % 2 == 0:
        return 'add returned {"sum":%d}.' % (i + 3)
    return "You said: hello number %d" % i


def parse_sse(body: str) -> list[tuple[str, dict]]:
    events = []
    for block in body.split("\n\n"):
        if not block.strip():
            continue
        event, data = "message", ""
        for line in block.split("\n"):
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                data += line[6:]
        events.append((event, json.loads(data) if data else {}))
    return events


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime


def post(conn: http.client.HTTPConnection, thread: str, text: str) -> list[tuple[str, dict]]:
    conn.request(
        "POST", f"/threads/{thread}/stream", body=json.dumps({"message": text}),
        headers={"content-type": "application/json"},
    )
    resp = conn.getresponse()
    body = resp.read().decode()
    assert resp.status == 200, (resp.status, body)
    assert resp.getheader("content-type", "").startswith("text/event-stream"), resp.getheaders()
    return parse_sse(body)


def answer(events: list[tuple[str, dict]]) -> str:
    assert events and events[-1][0] == "end", events[-3:]
    return events[-1][1]["answer"]


def functional(port: int) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port)
    conn.request("GET", "/healthz")
    resp = conn.getresponse()
    assert (resp.status, resp.read()) == (200, b"ok")
    events = post(conn, "smoke", 'use tool add with {"a": 1, "b": 2}')
    got = answer(events)
    assert got == 'add returned {"sum":3}.', got
    kinds = [e for e, _ in events]
    assert "messages" in kinds and "updates" in kinds, kinds
    got = answer(post(conn, "smoke", "hello"))
    assert got == "You said: hello", got
    sock = conn.sock
    got = answer(post(conn, "smoke-2", "hello again"))
    assert got == "You said: hello again", got
    assert conn.sock is sock, "the connection was not kept alive"
    conn.close()
    print("functional: ok (tool turn, echo turn on the same thread, keep-alive)")


def sequential(port: int, pid: int, turns: int) -> dict:
    conn = http.client.HTTPConnection("127.0.0.1", port)
    lat: list[float] = []
    kinds: dict[str, list[float]] = {"tool": [], "echo": []}
    cpu0, t0 = cpu_seconds(pid), time.perf_counter()
    for n in range(turns):
        i = n % TURNS_PER_THREAD
        start = time.perf_counter()
        got = answer(post(conn, f"seq-{n // TURNS_PER_THREAD}", turn_text(i)))
        dt = time.perf_counter() - start
        assert got == expected(i), (got, expected(i))
        lat.append(dt)
        kinds["tool" if i % 2 == 0 else "echo"].append(dt)
    wall, cpu = time.perf_counter() - t0, cpu_seconds(pid) - cpu0
    conn.close()
    return {
        "turns": turns, "wall": wall, "cpu": cpu, "lat": lat,
        "p50_tool": statistics.median(kinds["tool"]), "p50_echo": statistics.median(kinds["echo"]),
    }


async def a_post(reader, writer, port: int, thread: str, text: str) -> str:
    body = json.dumps({"message": text}).encode()
    writer.write(
        f"POST /threads/{thread}/stream HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\n"
        f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n".encode() + body
    )
    head = await reader.readuntil(b"\r\n\r\n")
    status = head.split(b" ", 2)[1]
    assert status == b"200", head
    headers = head.lower()
    chunks = []
    if b"transfer-encoding: chunked" in headers:
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            if size == 0:
                await reader.readuntil(b"\r\n")
                break
            chunks.append(await reader.readexactly(size))
            await reader.readexactly(2)
    else:
        length = int(headers.split(b"content-length: ")[1].split(b"\r\n")[0])
        chunks.append(await reader.readexactly(length))
    return answer(parse_sse(b"".join(chunks).decode()))


async def concurrent(port: int, pid: int, workers: int, turns: int) -> dict:
    per_worker = max(TURNS_PER_THREAD, turns // workers // TURNS_PER_THREAD * TURNS_PER_THREAD)
    lat: list[float] = []

    async def worker(w: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for n in range(per_worker):
            i = n % TURNS_PER_THREAD
            start = time.perf_counter()
            got = await a_post(reader, writer, port, f"c{workers}-w{w}-{n // TURNS_PER_THREAD}", turn_text(i))
            lat.append(time.perf_counter() - start)
            assert got == expected(i), (got, expected(i))
        writer.close()

    cpu0, t0 = cpu_seconds(pid), time.perf_counter()
    await asyncio.gather(*(worker(w) for w in range(workers)))
    wall, cpu = time.perf_counter() - t0, cpu_seconds(pid) - cpu0
    return {"turns": per_worker * workers, "wall": wall, "cpu": cpu, "lat": lat}


def report(name: str, r: dict) -> None:
    lat = sorted(r["lat"])
    p50 = statistics.median(lat) * 1000
    p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000
    extra = ""
    if "p50_tool" in r:
        extra = f" (tool turns {r['p50_tool'] * 1000:.1f} ms, echo turns {r['p50_echo'] * 1000:.1f} ms)"
    print(
        f"{name}: {r['turns']} turns in {r['wall']:.2f} s = {r['turns'] / r['wall']:.1f} turns/s, "
        f"p50 {p50:.1f} ms{extra}, p99 {p99:.1f} ms, server CPU {r['cpu'] / r['turns'] * 1000:.2f} ms/turn"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--python", default=str(ROOT / "target/langgraph-venv/bin/python"))
    p.add_argument("--agent", default="create_agent")
    p.add_argument("--turns", type=int, default=200, help="sequential turns (concurrency 1)")
    p.add_argument("--c64-turns", type=int, default=1280, help="turns at concurrency 64")
    p.add_argument("--warmup", type=int, default=20)
    args = p.parse_args()

    (ROOT / "target").mkdir(exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="langgraph-smoke-", dir=ROOT / "target")
    proc = subprocess.Popen(
        [args.python, str(HERE / "server.py"), "--db", f"{tmp}/checkpoints.sqlite", "--agent", args.agent],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        line = proc.stdout.readline().strip()
        prefix = "langgraph listening on http://127.0.0.1:"
        assert line.startswith(prefix), f"unexpected startup line {line!r}"
        port = int(line[len(prefix):])
        print(f"server pid {proc.pid}: {line}")
        functional(port)
        if args.warmup:
            sequential(port, proc.pid, args.warmup)
        report("concurrency 1", sequential(port, proc.pid, args.turns))
        if args.c64_turns:
            report("concurrency 64", asyncio.run(concurrent(port, proc.pid, 64, args.c64_turns)))
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
