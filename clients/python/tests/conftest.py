"""A real ``subs serve`` for the client's tests: the built binary
(``SUBS_BIN``, default ``target/debug/subs`` of the repository), a
temporary data directory, a config with a tenant key and an operator key,
the offline model, and the test agents (``SUBS_TOOLS_WASM``,
``SUBS_SCENARIO_WASM``; by default the components ``cargo test`` builds
under ``target/guests``)."""

from __future__ import annotations

import hashlib
import os
import secrets
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, Iterator, List, Optional

import pytest

from subs_client import AdminClient, Client

ROOT = Path(__file__).resolve().parents[3]
GUESTS = ROOT / "target" / "guests" / "wasm32-wasip2" / "release"

#: What makes the offline model call the `tools` agent's `add`.
ADD = 'use tool add with {"a": 1, "b": 2}'

# Settings a developer's shell may hold that would change the server.
_INHERITED = [
    "SUBS_LISTEN", "SUBS_DATA", "SUBS_STORE", "SUBS_DEFAULT_MODEL", "SUBS_CONFIG", "SUBS_SERVER",
    "SUBS_API_KEY", "SUBS_ADMIN_KEY", "SUBS_WORKER_SECRET", "RUST_LOG", "OPENAI_BASE_URL",
    "OPENAI_API_KEY", "ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY", "OLLAMA_BASE_URL",
    "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
]


def _file(env: str, default: Path, what: str) -> Path:
    path = Path(os.environ.get(env) or default)
    if not path.is_file():
        raise RuntimeError(f"{what} not found at {path}: build it (cargo build -p subs-cli; cargo test builds the agents) or set {env}")
    return path


class Server:
    """A running ``subs serve`` with tenant ``acme`` (``key``) and an
    operator key (``admin_key``)."""

    def __init__(self, binary: Path, extra_toml: str = "") -> None:
        self.dir = tempfile.TemporaryDirectory(prefix="subs-client-py-")
        base = Path(self.dir.name)
        self.key = "subs_" + secrets.token_hex(16)
        self.admin_key = "subs_admin_" + secrets.token_hex(16)
        digest = hashlib.sha256(self.admin_key.encode()).hexdigest()
        config = base / "subs.toml"
        config.write_text(
            f'[admin]\nkey_sha256 = "{digest}"\n\n[[keys]]\ntenant = "acme"\nkey = "{self.key}"\n\n{extra_toml}'
        )
        env = {k: v for k, v in os.environ.items() if k not in _INHERITED}
        env.setdefault("SUBS_CACHE", str(base / "cache"))
        self.process = subprocess.Popen(
            [str(binary), "serve", "--listen", "127.0.0.1:0", "--data", str(base / "data"), "--config", str(config)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            env=env,
            text=True,
        )
        self.stderr: List[str] = []
        threading.Thread(target=self._drain, daemon=True).start()
        assert self.process.stdout is not None
        deadline = time.monotonic() + 60
        self.url = ""
        for line in self.process.stdout:
            if line.startswith("subs listening on http://"):
                self.url = line.strip().removeprefix("subs listening on ")
                break
            if time.monotonic() > deadline:
                break
        if not self.url:
            self.stop()
            raise RuntimeError("subs serve did not start:\n" + "".join(self.stderr))
        threading.Thread(target=lambda: [None for _ in self.process.stdout or []], daemon=True).start()

    def _drain(self) -> None:
        for line in self.process.stderr or []:
            if len(self.stderr) < 2000:
                self.stderr.append(line)

    def client(self, key: Optional[str] = None, url: Optional[str] = None) -> Client:
        return Client(url or self.url, key=key or self.key, timeout=30)

    def admin(self) -> AdminClient:
        return AdminClient(self.url, self.admin_key)

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()
        self.dir.cleanup()


@pytest.fixture(scope="session")
def server() -> Iterator[Server]:
    binary = _file("SUBS_BIN", ROOT / "target" / "debug" / "subs", "the subs binary")
    running = Server(binary)
    with running.client() as subs:
        subs.upload_agent("tools", _file("SUBS_TOOLS_WASM", GUESTS / "tools.wasm", "the tools agent").read_bytes())
        scenario = _file("SUBS_SCENARIO_WASM", GUESTS / "test_scenario.wasm", "the scenario agent")
        subs.upload_agent("scenario", scenario.read_bytes())
    yield running
    running.stop()


@pytest.fixture(scope="session")
def tools_wasm() -> bytes:
    return _file("SUBS_TOOLS_WASM", GUESTS / "tools.wasm", "the tools agent").read_bytes()


@pytest.fixture(scope="session")
def scenario_wasm() -> bytes:
    return _file("SUBS_SCENARIO_WASM", GUESTS / "test_scenario.wasm", "the scenario agent").read_bytes()


def settled(subs: Client, session: str, status: str) -> None:
    """Waits (at most 30 s) for the session to reach ``status``."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if subs.get_session(session)["status"] == status:
            return
        time.sleep(0.05)
    raise AssertionError(f"session {session} never became {status}: {subs.get_session(session)}")


class CuttingProxy:
    """A TCP proxy to the server that cuts the first event stream it
    carries right after the ``cut_after``-th stored event (the blank line
    that ends the event with that many ``id:`` lines before it), closing
    both sides; every other connection passes through whole."""

    def __init__(self, upstream: str, cut_after: int) -> None:
        host, _, port = upstream.removeprefix("http://").partition(":")
        self.upstream = (host, int(port))
        self.cut_after = cut_after
        self.cuts = 0
        self.connections = 0
        self._armed = True
        self._lock = threading.Lock()
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            upstream = socket.create_connection(self.upstream)
            threading.Thread(target=self._pipe, args=(client, upstream, None), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, self._cut), daemon=True).start()

    def _cut(self, sent: bytes) -> Optional[int]:
        """How much of a response (all of it so far) to forward before
        cutting, when this is the stream to cut."""
        if b"text/event-stream" not in sent:
            return None
        at = 0
        for _ in range(self.cut_after):
            at = sent.find(b"\nid: ", at)
            if at < 0:
                return None
            at += 1
        end = sent.find(b"\n\n", at)
        if end < 0:
            return None
        with self._lock:
            if not self._armed:
                return None
            self._armed = False
            self.cuts += 1
        return end + 2

    def _pipe(self, source: socket.socket, sink: socket.socket, cut: Optional[Callable[[bytes], Optional[int]]]) -> None:
        seen = b""
        forwarded = 0
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                if cut is None:
                    sink.sendall(data)
                    continue
                seen += data
                stop = cut(seen) if self._armed else None
                if stop is not None:
                    sink.sendall(seen[forwarded:stop])
                    break
                sink.sendall(seen[forwarded:])
                forwarded = len(seen)
        except OSError:
            pass
        for s in (source, sink):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def close(self) -> None:
        self.listener.close()
