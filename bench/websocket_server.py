"""Our WebSocket server against the ``websockets`` library's, on localhost: one JSON object.

Issue #35 item 7: would ``websockets`` 15.0.1 (its last release for Python 3.9: the
host's 17.x needs 3.11), bundled into the agent's zipapp, serve the agent as well as
``adare_guest/websocket/``? Both agents are the very same
:class:`~adare_guest.server.AdareVMServer`; the library's runs with its listener replaced
by ``websockets.asyncio.server.serve`` (``serve`` below), configured like ours where the
library has a setting for it (``LIBRARY_SETTINGS``), from a private copy of the library
without its compiled ``speedups`` (a zipapp cannot import an extension module), so it
runs the pure-Python path a bundle would.

- ``bench``: both agents, started the same way, measured in the same run, interleaved
  (ours, theirs, ours, theirs...): 64 MiB binary pull and push through the host's own
  client (``AsyncGuest`` over ``AgentClient``, content verified), the ``get_timestamp``
  round trip beside a bare WebSocket ping on the same connection, ``shell("true")``.
- ``probes``: black-box hardening probes against the real agent processes (a fresh one
  per probe, so each peak RSS is its own; read from ``/proc/PID/status``), each saying
  held or not held with what was measured, against the behaviour docs/agent.md
  ("The WebSocket server") and docs/security.md state for ours. The probes on texts also
  run the library's agent receiving texts as bytes (``serve --recv-bytes``), its one
  setting that touches them.

    python bench/websocket_server.py [--rounds 5] [--rt-rounds 300] [--no-probes]
    python bench/websocket_server.py --probes-only [--probe e_ --probe g_] [--workdir D]
    python bench/websocket_server.py serve [--websockets-dir DIR] [--recv-bytes] RUN_DIR ...

The library is installed on first use (``pip install --target DIR --no-deps``; DIR
defaults to ``/tmp/ws15``) and put first on ``sys.path`` of the served process only:
this process, the host, uses the project's own ``websockets``.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import hashlib
import json
import os
import re
import resource
import select
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from adare_guest.server import AdareVMServer

REPO = Path(__file__).resolve().parents[1]
TOKEN = "bench-token"
LIBRARY_VERSION = "15.0.1"
LIBRARY_DIR = Path(os.environ.get("ADARE_BENCH_WEBSOCKETS_DIR", "/tmp/ws15"))
SPEEDUPS_MARKER = "speedups-removed.json"
MiB = 1024 * 1024
TRANSFER_SIZE = 64 * MiB
LIBRARY_SETTINGS: dict[str, Any] = {
    "compression": None,
    "server_header": None,
    "open_timeout": 5.0,  # websocket.server.HANDSHAKE_TIMEOUT
    "ping_interval": 20,
    "ping_timeout": 20,
    "close_timeout": 2.0,  # server.CLOSE_HANDSHAKE_TIMEOUT
    "max_size": 64 * MiB,  # server.WEBSOCKET_MAX_SIZE
    "max_queue": 16,  # websocket.connection.MAX_QUEUE (frames here, messages in ours)
    "write_limit": 32 * 1024,  # websocket.connection.WRITE_LIMIT
}
"""What ``serve`` passes to ``websockets.asyncio.server.serve`` (checked against our
constants when it starts), besides ``process_request``: the same bearer-token check."""


# --------------------------------------------------------------------------- serve side


def serve(argv: list[str]) -> int:
    """``serve [--websockets-dir DIR] RUN_DIR --host H --port P ...``: the agent's own
    command line (:func:`adare_guest.cli.main`), served by the library."""
    library_dir = LIBRARY_DIR
    if argv[:1] == ["--websockets-dir"]:
        library_dir, argv = Path(argv[1]), argv[2:]
    recv_bytes = argv[:1] == ["--recv-bytes"]
    argv = argv[recv_bytes:]
    # sys.path[0] is bench/: the agent is imported from the repository, the library
    # from its private copy, before anything else.
    sys.path[0:1] = [str(library_dir), str(REPO)]
    import websockets

    if not Path(websockets.__file__).is_relative_to(library_dir):
        print(f"websockets imported from {websockets.__file__}, not {library_dir}", file=sys.stderr)
        return 2
    from adare_guest import cli
    from adare_guest import server as agent_server

    # cli.run_agent imports AdareVMServer when it runs: it finds this one.
    agent_server.AdareVMServer = library_agent_class(recv_bytes)  # type: ignore[misc]
    return cli.main(argv)


def library_agent_class(recv_bytes: bool = False) -> type[AdareVMServer]:
    """:class:`AdareVMServer` with its listener replaced by the library's ``serve``.

    ``recv_bytes``: texts are received undecoded (``recv(decode=False)``), the library's
    one way not to build a ``str`` of a text over the protocol's limit; it also skips
    the library's only UTF-8 check (the agent's JSON parser still refuses bad UTF-8).
    """
    import importlib.util
    import logging

    import websockets
    from websockets.asyncio.server import Server, ServerConnection
    from websockets.asyncio.server import serve as library_serve
    from websockets.exceptions import ConnectionClosed as LibraryClosed
    from websockets.http11 import Request, Response
    from websockets.version import version as library_version

    from adare_guest.config import listen_host
    from adare_guest.server import (
        CLOSE_HANDSHAKE_TIMEOUT,
        WEBSOCKET_MAX_SIZE,
        AdareVMServer,
    )
    from adare_guest.websocket import connection as our_connection
    from adare_guest.websocket.server import HANDSHAKE_TIMEOUT

    ours = {
        "open_timeout": HANDSHAKE_TIMEOUT,
        "close_timeout": CLOSE_HANDSHAKE_TIMEOUT,
        "max_size": WEBSOCKET_MAX_SIZE,
        "max_queue": our_connection.MAX_QUEUE,
        "write_limit": our_connection.WRITE_LIMIT,
    }
    drifted = {k: v for k, v in ours.items() if LIBRARY_SETTINGS[k] != v}
    if drifted:
        raise SystemExit(f"LIBRARY_SETTINGS no longer match the agent's constants: {drifted}")
    log = logging.getLogger("adare_guest.server")

    class LibraryConnection:
        """What ``AdareVMServer._handle_connection`` uses of a connection, over the
        library's: its exceptions turned into ours, ``abort`` and ``start_close``."""

        def __init__(self, ws: ServerConnection) -> None:
            self._ws = ws
            self.remote_address = ws.remote_address
            self.request = ws.request
            self._closing: set[asyncio.Task[None]] = set()

        async def send(self, message: str | bytes) -> None:
            try:
                await self._ws.send(message)
            except LibraryClosed as exc:
                code = exc.rcvd.code if exc.rcvd is not None else 1006
                reason = exc.rcvd.reason if exc.rcvd is not None else ""
                raise our_connection.ConnectionClosed(code, reason) from None

        def abort(self) -> None:
            self._ws.transport.abort()

        async def close(self, code: int = 1000, reason: str = "") -> None:
            await self._ws.close(code, reason)

        def start_close(self, code: int = 1000, reason: str = "") -> None:
            task = asyncio.ensure_future(self._ws.close(code, reason))
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

        def __aiter__(self) -> AsyncIterator[str | bytes]:
            return self._messages()

        async def _messages(self) -> AsyncIterator[str | bytes]:
            # Ours ends its iteration on any close; the library raises unless 1000/1001.
            with contextlib.suppress(LibraryClosed):
                while True:
                    yield await self._ws.recv(decode=False if recv_bytes else None)

    class LibraryAgent(AdareVMServer):
        async def start(self) -> tuple[str, int]:
            if self._beating is None:
                self._beating = asyncio.ensure_future(self.heartbeat.run())
            host, warning = listen_host(self.config)
            if warning:
                log.warning("%s", warning)
            speedups = importlib.util.find_spec("websockets.speedups") is not None
            log.info(
                "websockets %s from %s, speedups %s, texts received as %s",
                library_version,
                Path(websockets.__file__).parent,
                "importable" if speedups else "absent",
                "bytes" if recv_bytes else "str",
            )
            try:
                server: Server = await library_serve(
                    self._serve_library,
                    host,
                    self.config.port,
                    process_request=self._library_request,
                    **LIBRARY_SETTINGS,
                )
            except OSError as exc:
                self.record_error(f"cannot listen on {host}:{self.config.port}: {exc}")
                raise
            # stop() and serve() use close() and wait_closed(), which Server has too.
            self._server = cast(Any, server)
            sockname = next(iter(server.sockets)).getsockname()
            self.listen_address = (host, int(sockname[1]))
            self.listening = True
            log.info("listening on %s:%d", *self.listen_address)
            return self.listen_address

        def _library_request(self, ws: ServerConnection, request: Request) -> Response | None:
            refusal = self._process_request(cast(Any, request), ws.remote_address)
            if refusal is None:
                return None
            response = ws.respond(refusal.status, refusal.body.decode())
            for name, value in refusal.headers:
                response.headers[name] = value
            return response

        async def _serve_library(self, ws: ServerConnection) -> None:
            await self._handle_connection(cast(Any, LibraryConnection(ws)))

    return LibraryAgent


# --------------------------------------------------------------------------- the library


def prepare_library(directory: Path) -> dict[str, Any]:
    """Install the library into ``directory`` (once) without its compiled speedups."""
    marker = directory / SPEEDUPS_MARKER
    version_file = directory / "websockets" / "version.py"
    installed = version_file.exists() and f'"{LIBRARY_VERSION}"' in version_file.read_text()
    if not (installed and marker.exists()):
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--target", str(directory),
             "--no-deps", "--upgrade", f"websockets=={LIBRARY_VERSION}"],
            check=True, stdout=subprocess.DEVNULL,
        )  # fmt: skip
        removed = sorted(p.name for p in (directory / "websockets").glob("speedups*.so"))
        for name in removed:
            (directory / "websockets" / name).unlink()
        marker.write_text(json.dumps({"removed": removed}))
    removed = json.loads(marker.read_text())["removed"]
    return {
        "package": "websockets",
        "version": LIBRARY_VERSION,
        "directory": str(directory),
        "speedups_in_wheel": removed,
        "speedups_removed": bool(removed),
        "speedups_present_now": sorted(
            p.name for p in (directory / "websockets").glob("speedups*.so")
        ),
        "settings": {**LIBRARY_SETTINGS, "process_request": "AdareVMServer._process_request"},
    }


# --------------------------------------------------------------------------- agents


@dataclass
class Agent:
    kind: str
    proc: asyncio.subprocess.Process
    port: int
    log: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def memory_kib(self) -> dict[str, int]:
        """``VmRSS`` and ``VmHWM`` (KiB) from ``/proc/PID/status``."""
        fields = {}
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            name, _, value = line.partition(":")
            if name in ("VmRSS", "VmHWM"):
                fields[name] = int(value.split()[0])
        return fields

    def reset_peak(self) -> None:
        """Set ``VmHWM`` back to the current RSS (``clear_refs``, Linux 4.0+)."""
        Path(f"/proc/{self.pid}/clear_refs").write_text("5")

    def descriptors(self) -> int:
        return len(os.listdir(f"/proc/{self.pid}/fd"))

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


BOTH = ("ours", "library")
RECV_BYTES = "library_recv_bytes"
"""The library's agent receiving texts undecoded: a variant for the probes on texts."""


def agent_argv(kind: str, run_dir: Path, library_dir: Path) -> list[str]:
    """The two agents' command lines: the same but for what serves WebSocket."""
    common = [str(run_dir), "--host", "127.0.0.1", "--port", "0"]
    if kind == "ours":
        return [sys.executable, "-m", "adare_guest", *common]
    script = str(Path(__file__).resolve())
    variant = ["--recv-bytes"] if kind == RECV_BYTES else []
    return [
        sys.executable,
        script,
        "serve",
        "--websockets-dir",
        str(library_dir),
        *variant,
        *common,
    ]


def write_config(run_dir: Path) -> Path:
    """The config a VM's agent gets (a token, its log level); the log file's path."""
    from pytest_adare.agent.install import AGENT_LOG_LEVEL

    run_dir.mkdir(parents=True, exist_ok=True)
    log = run_dir / "agent.log"
    config = {"token": TOKEN, "logfile": str(log), "log_level": AGENT_LOG_LEVEL}
    (run_dir / "config.json").write_text(json.dumps(config))
    (run_dir / "config.json").chmod(0o600)
    return log


@contextlib.asynccontextmanager
async def running_agent(
    kind: str, run_dir: Path, library_dir: Path, nofile: int | None = None
) -> AsyncIterator[Agent]:
    """An agent process with a token (and ``nofile`` descriptors), once it listens."""
    log = write_config(run_dir)

    def limit_descriptors() -> None:
        if nofile is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

    with (run_dir / "stderr").open("wb") as stderr:
        proc = await asyncio.create_subprocess_exec(
            *agent_argv(kind, run_dir, library_dir),
            cwd=REPO, stdout=subprocess.DEVNULL, stderr=stderr, preexec_fn=limit_descriptors,
        )  # fmt: skip
    try:
        port = None
        for _ in range(1200):
            found = re.search(
                r"adare_guest\.server: listening on 127\.0\.0\.1:(\d+)",
                log.read_text() if log.exists() else "",
            )
            if found:
                port = int(found.group(1))
                break
            if proc.returncode is not None:
                break
            await asyncio.sleep(0.05)
        if port is None:
            tail = (run_dir / "stderr").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"the {kind} agent did not listen: {tail}")
        yield Agent(kind, proc, port, log)
    finally:
        if proc.returncode is None:
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 15)
            except asyncio.TimeoutError:
                proc.kill()
                await proc.wait()


# --------------------------------------------------------------------------- bench


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as src:
        while block := src.read(MiB):
            digest.update(block)
    return digest.hexdigest()


async def _timed(func: Callable[[], Awaitable[Any]], rounds: int) -> list[float]:
    samples = []
    for _ in range(rounds):
        started = time.perf_counter()
        await func()
        samples.append(time.perf_counter() - started)
    return samples


def _percentiles_ms(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50_ms": round(statistics.median(ordered) * 1000, 3),
        "p99_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000, 3),
        "n": len(ordered),
    }


async def measure_once(
    agent: Agent, source: Path, digest: str, workdir: Path, rt_rounds: int, shell_rounds: int
) -> dict[str, Any]:
    """One round of every figure against ``agent``, through the host's own client."""
    from pytest_adare.agent.websocket_client import AgentClient
    from pytest_adare.guest import AsyncGuest

    client = await AgentClient.connect("127.0.0.1", agent.port, TOKEN)
    try:
        guest = AsyncGuest(client)
        pulled, pushed = workdir / "pulled.bin", workdir / f"pushed-{agent.kind}.bin"
        started = time.perf_counter()
        await guest.pull(str(source), pulled)
        pull_s = time.perf_counter() - started
        if _sha256(pulled) != digest:
            raise AssertionError(f"{agent.kind}: the pulled file differs")
        pulled.unlink()
        started = time.perf_counter()
        await guest.push(source, str(pushed))
        push_s = time.perf_counter() - started
        if _sha256(pushed) != digest:
            raise AssertionError(f"{agent.kind}: the pushed file differs")
        pushed.unlink()
        for _ in range(20):
            await guest.call("get_timestamp")
        tool = await _timed(lambda: guest.call("get_timestamp"), rt_rounds)
        ws = client._ws

        async def ping() -> None:
            await (await ws.ping())

        bare = await _timed(ping, rt_rounds)
        shell = await _timed(lambda: guest.shell("true"), shell_rounds)
    finally:
        await client.close()
    return {
        "pull_mb_per_s": TRANSFER_SIZE / 1e6 / pull_s,
        "push_mb_per_s": TRANSFER_SIZE / 1e6 / push_s,
        "get_timestamp": tool,
        "websocket_ping": bare,
        "shell_true": shell,
    }


def _spread(samples: list[float], digits: int) -> dict[str, Any]:
    return {
        "median": round(statistics.median(samples), digits),
        "min": round(min(samples), digits),
        "max": round(max(samples), digits),
        "samples": [round(s, digits) for s in samples],
    }


def _latency_summary(per_round: list[list[float]]) -> dict[str, Any]:
    pooled = [s for samples in per_round for s in samples]
    return {
        **_percentiles_ms(pooled),
        "p50_ms_per_round": [_percentiles_ms(s)["p50_ms"] for s in per_round],
        "p99_ms_per_round": [_percentiles_ms(s)["p99_ms"] for s in per_round],
    }


async def bench(
    workdir: Path, library_dir: Path, rounds: int, rt_rounds: int, shell_rounds: int
) -> dict[str, Any]:
    source = workdir / "transfer.bin"
    source.write_bytes(os.urandom(TRANSFER_SIZE))
    digest = _sha256(source)
    results: dict[str, list[dict[str, Any]]] = {"ours": [], "library": []}
    async with (
        running_agent("ours", workdir / "bench-ours", library_dir) as ours,
        running_agent("library", workdir / "bench-library", library_dir) as library,
    ):
        idle = {agent.kind: agent.memory_kib()["VmRSS"] / 1024 for agent in (ours, library)}
        for _ in range(rounds):
            for agent in (ours, library):
                results[agent.kind].append(
                    await measure_once(agent, source, digest, workdir, rt_rounds, shell_rounds)
                )
        peaks = {agent.kind: agent.memory_kib()["VmHWM"] / 1024 for agent in (ours, library)}
    source.unlink()
    report: dict[str, Any] = {}
    for kind, runs in results.items():
        report[kind] = {
            "agent_rss_at_start_mib": round(idle[kind], 1),
            "agent_peak_rss_mib": round(peaks[kind], 1),
            "pull_64mib_mb_per_s": _spread([r["pull_mb_per_s"] for r in runs], 1),
            "push_64mib_mb_per_s": _spread([r["push_mb_per_s"] for r in runs], 1),
            "get_timestamp": _latency_summary([r["get_timestamp"] for r in runs]),
            "floor_websocket_ping": _latency_summary([r["websocket_ping"] for r in runs]),
            "shell_true": _latency_summary([r["shell_true"] for r in runs]),
        }
    ours_r, lib_r = report["ours"], report["library"]
    report["library_over_ours"] = {
        "_reading": "throughput: above 1 the library is faster; times: above 1 it is slower",
        "pull_throughput": round(
            lib_r["pull_64mib_mb_per_s"]["median"] / ours_r["pull_64mib_mb_per_s"]["median"], 3
        ),
        "push_throughput": round(
            lib_r["push_64mib_mb_per_s"]["median"] / ours_r["push_64mib_mb_per_s"]["median"], 3
        ),
        **{
            f"{name}_{p}": round(lib_r[name][f"{p}_ms"] / ours_r[name][f"{p}_ms"], 3)
            for name in ("get_timestamp", "floor_websocket_ping", "shell_true")
            for p in ("p50", "p99")
        },
    }
    return report


# --------------------------------------------------------------------------- raw client


def mask_payload(payload: bytes, mask: bytes) -> bytes:
    """RFC 6455 masking, as one big-integer XOR (fast enough for tens of MiB)."""
    size = len(payload)
    if not size:
        return b""
    key = (mask * (size // 4 + 1))[:size]
    return (int.from_bytes(payload, "little") ^ int.from_bytes(key, "little")).to_bytes(
        size, "little"
    )


def frame_head(
    opcode: int, size: int, *, masked: bool = True, mask: bytes = b"", fin: bool = True
) -> bytes:
    first = (0x80 if fin else 0) | opcode
    bit = 0x80 if masked else 0
    if size < 126:
        head = bytes([first, bit | size])
    elif size < 1 << 16:
        head = bytes([first, bit | 126]) + struct.pack("!H", size)
    else:
        head = bytes([first, bit | 127]) + struct.pack("!Q", size)
    return head + mask if masked else head


def client_frame(opcode: int, payload: bytes, *, masked: bool = True, fin: bool = True) -> bytes:
    mask = os.urandom(4)
    head = frame_head(opcode, len(payload), masked=masked, mask=mask, fin=fin)
    return head + (mask_payload(payload, mask) if masked else payload)


def request_head(authorization: list[bytes]) -> bytes:
    lines = [
        b"GET / HTTP/1.1",
        b"Host: 127.0.0.1",
        b"Upgrade: websocket",
        b"Connection: Upgrade",
        b"Sec-WebSocket-Key: " + base64.b64encode(os.urandom(16)),
        b"Sec-WebSocket-Version: 13",
        *(b"Authorization: " + value for value in authorization),
    ]
    return b"\r\n".join(lines) + b"\r\n\r\n"


async def open_raw(
    port: int, rcvbuf: int | None = None
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    sock = socket.socket()
    if rcvbuf is not None:  # before connect: the window scale is fixed by the handshake
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    return await asyncio.open_connection(sock=sock, limit=1 << 20)


async def handshake(
    port: int, authorization: list[bytes], rcvbuf: int | None = None
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, bytes]:
    reader, writer = await open_raw(port, rcvbuf)
    writer.write(request_head(authorization))
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
    return reader, writer, head


async def logged_in(
    port: int, rcvbuf: int | None = None
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer, head = await handshake(port, [f"Bearer {TOKEN}".encode()], rcvbuf)
    if not head.startswith(b"HTTP/1.1 101 "):
        raise RuntimeError(f"not accepted: {head[:200]!r}")
    return reader, writer


async def read_frame(reader: asyncio.StreamReader, timeout: float) -> tuple[int, bytes]:
    """``(opcode, payload)`` of the server's next (unmasked) frame."""
    head = await asyncio.wait_for(reader.readexactly(2), timeout)
    size = head[1] & 0x7F
    extra = await reader.readexactly({126: 2, 127: 8}.get(size, 0))
    length = int.from_bytes(extra, "big") if extra else size
    return head[0] & 0x0F, await asyncio.wait_for(reader.readexactly(length), timeout)


async def close_code(reader: asyncio.StreamReader, timeout: float) -> int | str:
    """The code of the server's close frame, or what happened instead."""
    deadline = time.monotonic() + timeout
    try:
        while True:
            opcode, payload = await read_frame(reader, max(0.01, deadline - time.monotonic()))
            if opcode == 0x8:
                return int.from_bytes(payload[:2], "big") if len(payload) >= 2 else 1005
    except (asyncio.IncompleteReadError, ConnectionError):
        return "ended without a close frame"
    except asyncio.TimeoutError:
        return f"still open after {timeout:g} s"


async def json_frames(
    reader: asyncio.StreamReader, done: Callable[[dict[str, Any]], bool], timeout: float
) -> dict[str, Any]:
    """The first JSON text message from the server for which ``done`` holds."""
    deadline = time.monotonic() + timeout
    while True:
        opcode, payload = await read_frame(reader, max(0.01, deadline - time.monotonic()))
        if opcode == 0x1:
            message = json.loads(payload)
            if done(message):
                return cast(dict[str, Any], message)


def tool_call(call_id: str, tool: str, **params: Any) -> bytes:
    call = {"type": "tool_call", "id": call_id, "timestamp": None, "tool": tool, "params": params}
    return client_frame(0x1, json.dumps(call).encode())


async def eof_after(reader: asyncio.StreamReader, timeout: float) -> float | None:
    """Seconds until the server closes the connection (None: not within ``timeout``)."""
    started = time.monotonic()
    try:
        while await asyncio.wait_for(reader.read(65536), timeout):
            pass
    except asyncio.TimeoutError:
        return None
    except ConnectionError:
        pass
    return round(time.monotonic() - started, 3)


# --------------------------------------------------------------------------- memory


@contextlib.asynccontextmanager
async def peak_memory(agent: Agent) -> AsyncIterator[dict[str, Any]]:
    """Fills the yielded dict, on exit, with the agent's RSS before and its peak during
    the block (MiB), from ``/proc/PID/status`` (``VmHWM`` reset at entry)."""
    agent.reset_peak()
    before = agent.memory_kib()["VmRSS"]
    figures: dict[str, Any] = {}
    try:
        yield figures
    finally:
        memory = agent.memory_kib()
        figures.update(
            rss_before_mib=round(before / 1024, 1),
            peak_rss_mib=round(memory["VmHWM"] / 1024, 1),
            rss_after_mib=round(memory["VmRSS"] / 1024, 1),
            peak_growth_mib=round((memory["VmHWM"] - before) / 1024, 1),
        )


# --------------------------------------------------------------------------- probes


@dataclass
class Probe:
    name: str
    criterion: str
    run: Callable[[Agent, Path], Awaitable[dict[str, Any]]]
    nofile: int | None = None
    kinds: tuple[str, ...] = BOTH


HANDSHAKE_BOUND = 5.0
"""Our ``HANDSHAKE_TIMEOUT``: the time a client has for its whole request head."""
SLACK = 1.0


async def probe_partial_head(agent: Agent, _workdir: Path) -> dict[str, Any]:
    _reader, writer = await open_raw(agent.port)
    writer.write(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    stopped = await eof_after(_reader, 30)
    writer.close()
    # A slow sender: the same head, one byte every 0.5 s, never finished.
    reader, writer = await open_raw(agent.port)
    head = request_head([f"Bearer {TOKEN}".encode()])[:-2]

    async def drip() -> None:
        for byte in head:
            writer.write(bytes([byte]))
            await asyncio.sleep(0.5)

    dripping = asyncio.ensure_future(drip())
    dripped = await eof_after(reader, 30)
    dripping.cancel()
    with contextlib.suppress(asyncio.CancelledError, ConnectionError):
        await dripping
    writer.close()
    bound = HANDSHAKE_BOUND + SLACK
    return {
        "held": stopped is not None and dripped is not None and max(stopped, dripped) <= bound,
        "dropped_after_s_partial_head": stopped,
        "dropped_after_s_one_byte_per_500ms": dripped,
    }


class IdleSocketFlood:
    """A thread holding ``size`` idle connections to ``port`` open, opening a new one for
    each the agent drops (tests/agent/test_hardening_connection_flood.py)."""

    def __init__(self, port: int, size: int) -> None:
        self.port, self.size = port, size
        self.opened = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> IdleSocketFlood:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _open(self) -> socket.socket:
        sock = socket.socket()
        sock.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            sock.connect(("127.0.0.1", self.port))
        self.opened += 1
        return sock

    def _run(self) -> None:
        held: dict[int, socket.socket] = {}
        poller = select.poll()
        try:
            while not self._stop.is_set():
                while len(held) < self.size:
                    sock = self._open()
                    held[sock.fileno()] = sock
                    poller.register(sock, select.POLLIN | select.POLLHUP | select.POLLERR)
                for fd, _event in poller.poll(50):  # the agent closed or reset it
                    poller.unregister(fd)
                    held.pop(fd).close()
        finally:
            for sock in held.values():
                sock.close()


FLOOD_NOFILE = 1024


async def host_gets_status(port: int) -> tuple[float, str | None]:
    """Seconds for the real host (``AgentClient``, its own retries) to connect and get
    ``get_status`` answered; the error when it could not."""
    from pytest_adare.agent.websocket_client import AgentClient
    from pytest_adare.guest import AsyncGuest

    started = time.monotonic()
    try:
        client = await AgentClient.connect("127.0.0.1", port, TOKEN)
        try:
            await AsyncGuest(client).call("get_status", timeout=30)
        finally:
            await client.close()
    except Exception as exc:
        return round(time.monotonic() - started, 3), f"{type(exc).__name__}: {exc}"[:300]
    return round(time.monotonic() - started, 3), None


FLOOD_WATCH = 14.0
"""Seconds the host keeps connecting during the flood: past two handshake timeouts, so
the moments when the idle sockets are dropped and reopened are in it too."""


async def probe_connection_flood(agent: Agent, _workdir: Path) -> dict[str, Any]:
    size = 2 * FLOOD_NOFILE
    log_before = len(agent.log_text())
    most = 0

    async def watch_descriptors() -> None:
        nonlocal most
        while True:
            most = max(most, agent.descriptors())
            await asyncio.sleep(0.1)

    watching = asyncio.ensure_future(watch_descriptors())
    attempts: list[dict[str, Any]] = []
    with IdleSocketFlood(agent.port, size) as flood:
        started = time.monotonic()
        await asyncio.sleep(2)  # the flood fills what it can
        while time.monotonic() - started < 2 + FLOOD_WATCH:
            at = round(time.monotonic() - started, 1)
            took, error = await host_gets_status(agent.port)
            attempts.append({"at_s": at, "took_s": took, **({"error": error} if error else {})})
            await asyncio.sleep(0.5)
        opened = flood.opened
    await asyncio.sleep(1)  # what the agent logs of the idle sockets' closing
    watching.cancel()
    log = agent.log_text()[log_before:]
    times = [a["took_s"] for a in attempts]
    return {
        "held": not any("error" in a for a in attempts) and max(times) < HANDSHAKE_BOUND,
        # What tests/agent/test_hardening_connection_flood.py also asks of ours.
        "also_never_out_of_descriptors": "Too many open files" not in log,
        "also_log_under_20kB_without_traceback": len(log) < 20_000 and "Traceback" not in log,
        "host_connect_and_get_status_max_s": max(times),
        "host_connect_and_get_status_median_s": statistics.median(times),
        "host_attempts": attempts,
        "idle_sockets_held": size,
        "idle_sockets_opened": opened,
        "agent_descriptors_max": most,
        "agent_descriptor_limit": FLOOD_NOFILE,
        "log_bytes_flood_and_its_end": len(log),
        "log_tracebacks_flood_and_its_end": log.count("Traceback"),
        "log_lines_flood_and_its_end": log.count("\n"),
    }


async def probe_oversized_header(agent: Agent, _workdir: Path) -> dict[str, Any]:
    reader, writer = await logged_in(agent.port)
    started = time.monotonic()
    writer.write(frame_head(0x2, 65 * MiB, mask=os.urandom(4)))
    code = await close_code(reader, 10)
    took = round(time.monotonic() - started, 3)
    writer.close()
    return {"held": code == 1009 and took < 2, "close": code, "closed_after_s": took}


async def probe_tokens(agent: Agent, _workdir: Path) -> dict[str, Any]:
    good = f"Bearer {TOKEN}".encode()
    cases = {
        "missing": [],
        "wrong": [b"Bearer wrong-token"],
        "two_headers_one_right": [good, b"Bearer wrong-token"],
        "non_ascii_byte": [b"Bearer \xe9" + TOKEN.encode()],
        "right": [good],
    }
    answers: dict[str, Any] = {}
    for name, values in cases.items():
        reader, writer, head = await handshake(agent.port, values)
        lines = head.decode("latin-1").split("\r\n")
        headers = {
            k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:])
        }
        answers[name] = {
            "status": int(lines[0].split()[1]),
            "www_authenticate": headers.get("www-authenticate"),
        }
        writer.close()
        del reader
    refused = all(
        a["status"] == 401 and a["www_authenticate"] == "Bearer"
        for name, a in answers.items()
        if name != "right"
    )
    return {
        "held": refused and answers["right"]["status"] == 101,
        "refused_before_upgrade": all(
            a["status"] != 101 for name, a in answers.items() if name != "right"
        ),
        "answers": answers,
    }


PING_FLOOD_BYTES = 64 * MiB
PING_FLOOD_BOUND_MIB = 16


async def probe_ping_flood(agent: Agent, _workdir: Path) -> dict[str, Any]:
    reader, writer = await logged_in(agent.port)
    await json_frames(reader, lambda m: True, 10)  # the welcome event
    sent = 0
    async with peak_memory(agent) as memory:
        deadline = time.monotonic() + 20
        while sent < PING_FLOOD_BYTES and time.monotonic() < deadline:
            batch = b"".join(
                client_frame(0x9, f"{sent:016d}-{i:04d}".encode().ljust(125, b"."))
                for i in range(1000)
            )
            writer.write(batch)
            try:
                await asyncio.wait_for(writer.drain(), 1.0)
            except asyncio.TimeoutError:
                break  # the agent stopped reading
            sent += len(batch)
        await asyncio.sleep(0.5)
    # Then the client reads: the session must still answer.
    started = time.monotonic()
    writer.write(tool_call("after", "get_status"))
    pongs, answered = 0, False
    try:
        while not answered:
            opcode, payload = await read_frame(reader, 60)
            pongs += opcode == 0xA
            answered = opcode == 0x1 and b'"tool_result"' in payload
    except (asyncio.TimeoutError, asyncio.IncompleteReadError, ConnectionError):
        pass
    writer.close()
    return {
        "held": memory["peak_growth_mib"] <= PING_FLOOD_BOUND_MIB,
        "flood_mib_taken_by_agent": round(sent / MiB, 1),
        **memory,
        "pongs_read_afterwards": pongs,
        "answered_afterwards": answered,
        "answered_after_reading_the_pongs_s": (
            round(time.monotonic() - started, 3) if answered else None
        ),
    }


async def probe_unmasked(agent: Agent, _workdir: Path) -> dict[str, Any]:
    reader, writer = await logged_in(agent.port)
    writer.write(client_frame(0x1, b'{"type": "ping", "id": "x"}', masked=False))
    code = await close_code(reader, 10)
    writer.close()
    return {"held": code == 1002, "close": code}


BIG_TEXT = 17 * MiB
BIG_TEXT_BOUND = 4
"""Peak growth bound, times the text: less than the 4-bytes-a-character ``str`` that
decoding it would build (its last character is a 4-byte one), which ours never does
for a text over the 16 MiB protocol limit (docs/security.md)."""


async def probe_big_text(agent: Agent, _workdir: Path) -> dict[str, Any]:
    reader, writer = await logged_in(agent.port)
    await json_frames(reader, lambda m: True, 10)  # the welcome event
    frame = client_frame(0x1, b"x" * (BIG_TEXT - 4) + "\U0001f600".encode())
    async with peak_memory(agent) as memory:
        writer.write(frame)
        del frame
        await writer.drain()
        try:
            event = await json_frames(
                reader, lambda m: m.get("type") == "event" and "exceeds" in json.dumps(m), 60
            )
            error: str | None = str(event.get("data", {}).get("message"))
        except (asyncio.TimeoutError, asyncio.IncompleteReadError, ConnectionError):
            error = None
    # The session stays usable.
    writer.write(tool_call("after", "get_status"))
    try:
        await json_frames(reader, lambda m: m.get("type") == "tool_result", 30)
        usable = True
    except (asyncio.TimeoutError, asyncio.IncompleteReadError, ConnectionError):
        usable = False
    writer.close()
    bound_mib = BIG_TEXT_BOUND * BIG_TEXT / MiB
    return {
        "held": error is not None and usable and memory["peak_growth_mib"] <= bound_mib,
        "error_event": error,
        "session_usable_afterwards": usable,
        "peak_growth_bound_mib": bound_mib,
        **memory,
    }


PULL_FILE = 256 * MiB
PULL_CHUNK = 8 * MiB  # binary_transfer.MAX_CHUNK
PULL_WINDOW = 16  # binary_transfer.MAX_WINDOW
PULL_BOUND_MIB = 64
"""Half of what the window lets the agent send unacknowledged (16 x 8 MiB): a send that
waits for the client holds about one chunk in its buffers, plus the one read ahead."""


async def probe_pull_not_read(agent: Agent, workdir: Path) -> dict[str, Any]:
    path = workdir / "sparse.bin"
    if not path.exists():
        with path.open("wb") as out:
            out.truncate(PULL_FILE)
    reader, writer = await logged_in(agent.port, rcvbuf=64 * 1024)
    await json_frames(reader, lambda m: True, 10)  # the welcome event
    async with peak_memory(agent) as memory:
        writer.write(
            tool_call("pull", "pull_file", guest_path=str(path), transfer_id=1,
                      chunk_size=PULL_CHUNK, window=PULL_WINDOW)
        )  # fmt: skip
        await writer.drain()
        await asyncio.sleep(10)  # reading nothing
    dropped = reader.at_eof() or writer.is_closing()
    writer.close()
    return {
        "held": memory["peak_growth_mib"] <= PULL_BOUND_MIB,
        "pull": f"{PULL_FILE // MiB} MiB, chunk {PULL_CHUNK // MiB} MiB, window {PULL_WINDOW}",
        "peak_growth_bound_mib": PULL_BOUND_MIB,
        **memory,
        "observed_s": 10,
        "client_dropped_within": dropped,
    }


async def probe_invalid_utf8(agent: Agent, _workdir: Path) -> dict[str, Any]:
    reader, writer = await logged_in(agent.port)
    await json_frames(reader, lambda m: True, 10)  # the welcome event
    # The first fragment of a text, not UTF-8; the rest never comes.
    started = time.monotonic()
    writer.write(client_frame(0x1, b'{"type": "ping", "id": "\xff\xfe', fin=False))
    code = await close_code(reader, 5)
    took = round(time.monotonic() - started, 3)
    writer.close()
    # A whole text, not UTF-8.
    reader, writer = await logged_in(agent.port)
    await json_frames(reader, lambda m: True, 10)
    writer.write(client_frame(0x1, b'{"type": "ping", "id": "\xff\xfe"}'))
    whole = await close_code(reader, 5)
    writer.close()
    return {
        "held": code == 1007 and whole == 1007,
        "first_fragment": code,
        "first_fragment_closed_after_s": took if isinstance(code, int) else None,
        "whole_message": whole,
    }


PROBES = [
    Probe(
        "a_partial_request_head",
        f"dropped within {HANDSHAKE_BOUND + SLACK:g} s (5 s handshake limit + 1 s)",
        probe_partial_head,
    ),
    Probe(
        "b_idle_connection_flood",
        f"{2 * FLOOD_NOFILE} idle sockets against {FLOOD_NOFILE} descriptors: the host "
        f"connects and gets get_status answered within {HANDSHAKE_BOUND:g} s, every time it "
        f"tries for {FLOOD_WATCH:g} s",
        probe_connection_flood,
        nofile=FLOOD_NOFILE,
    ),
    Probe(
        "c_oversized_frame_header",
        "a binary frame header announcing 65 MiB (no payload sent): close 1009 within 2 s",
        probe_oversized_header,
    ),
    Probe(
        "d_bad_token",
        "missing / wrong / doubled / non-ASCII token: 401 with WWW-Authenticate: Bearer, no "
        "upgrade; the right one: 101",
        probe_tokens,
    ),
    Probe(
        "e_ping_flood_never_read",
        f"64 MiB of 125-byte pings, never reading: peak RSS growth <= {PING_FLOOD_BOUND_MIB} MiB",
        probe_ping_flood,
    ),
    Probe("f_unmasked_frame", "an unmasked client frame: close 1002", probe_unmasked),
    Probe(
        "g_text_over_16_mib",
        f"a 17 MiB text (ASCII and one 4-byte character): the protocol's error event, the "
        f"session usable, peak RSS growth <= {BIG_TEXT_BOUND} x 17 MiB",
        probe_big_text,
        kinds=(*BOTH, RECV_BYTES),
    ),
    Probe(
        "i_text_not_utf8",
        "a text that is not UTF-8: close 1007, from its first fragment (within 5 s) and "
        "as a whole message",
        probe_invalid_utf8,
        kinds=(*BOTH, RECV_BYTES),
    ),
    Probe(
        "h_pull_never_read",
        f"a binary pull of 256 MiB (8 MiB chunks, window 16) to a client that reads "
        f"nothing for 10 s: peak RSS growth <= {PULL_BOUND_MIB} MiB",
        probe_pull_not_read,
    ),
]


async def probes(workdir: Path, library_dir: Path, only: set[str] | None) -> dict[str, Any]:
    report: dict[str, Any] = {}
    for probe in PROBES:
        if only and not any(probe.name.startswith(prefix) for prefix in only):
            continue
        entry: dict[str, Any] = {"criterion": probe.criterion}
        for kind in probe.kinds:
            run_dir = workdir / f"probe-{probe.name}-{kind}"
            async with running_agent(kind, run_dir, library_dir, probe.nofile) as agent:
                log_before = len(agent.log_text())
                try:
                    result = await probe.run(agent, workdir)
                except Exception as exc:
                    result = {"held": False, "probe_failed": f"{type(exc).__name__}: {exc}"}
                result["agent_alive"] = agent.proc.returncode is None
            # Once the agent stopped: all it logged about the probe is in.
            log = agent.log_text()[log_before:]
            result["log_bytes_until_stopped"] = len(log)
            result["log_tracebacks_until_stopped"] = log.count("Traceback")
            entry[kind] = result
        report[probe.name] = entry
    return report


# --------------------------------------------------------------------------- main


def _raise_descriptor_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 2 * FLOOD_NOFILE + 512
    if soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(wanted, hard), hard))


def _served_library(log: Path) -> str | None:
    found = re.search(r"websockets \S+ from .*", log.read_text(errors="replace"))
    return found.group(0) if found else None


async def main(args: argparse.Namespace) -> dict[str, Any]:
    from websockets.version import version as host_websockets

    from pytest_adare.agent.install import AGENT_LOG_LEVEL

    sys.path.insert(0, str(REPO))
    _raise_descriptor_limit()
    library = prepare_library(args.websockets_dir)
    report: dict[str, Any] = {
        "host": "localhost",
        "machine": {"cpus": os.cpu_count(), "load_average": os.getloadavg()},
        "python": sys.version.split()[0],
        "host_client_websockets": host_websockets,
        "agent_log_level": AGENT_LOG_LEVEL,
        "library": library,
    }
    with contextlib.ExitStack() as stack:
        if args.workdir is None:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="adare-ws-")))
        else:
            workdir = args.workdir
            workdir.mkdir(parents=True, exist_ok=True)
        async with running_agent("library", workdir / "check", args.websockets_dir) as agent:
            report["library"]["served_process_says"] = _served_library(agent.log)
        if not args.probes_only:
            started = time.monotonic()
            report["bench"] = {
                "rounds": args.rounds,
                "rt_rounds_per_round": args.rt_rounds,
                "shell_rounds_per_round": args.shell_rounds,
                **await bench(
                    workdir, args.websockets_dir, args.rounds, args.rt_rounds, args.shell_rounds
                ),
                "seconds": round(time.monotonic() - started, 1),
            }
        if not args.no_probes:
            started = time.monotonic()
            only = set(args.probe) if args.probe else None
            report["probes"] = await probes(workdir, args.websockets_dir, only)
            report["probes_seconds"] = round(time.monotonic() - started, 1)
            report["probes_held"] = {
                kind: sorted(k for k, v in report["probes"].items() if v[kind]["held"])
                for kind in BOTH
            }
            report["probes_not_held"] = {
                kind: sorted(k for k, v in report["probes"].items() if not v[kind]["held"])
                for kind in BOTH
            }
            report["probes_held_count"] = {kind: len(report["probes_held"][kind]) for kind in BOTH}
    report["machine"]["load_average_after"] = os.getloadavg()
    return report


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        sys.exit(serve(sys.argv[2:]))
    sys.path.insert(0, str(REPO))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds per agent")
    parser.add_argument("--rt-rounds", type=int, default=300, help="round trips per round")
    parser.add_argument("--shell-rounds", type=int, default=100)
    parser.add_argument("--no-probes", action="store_true")
    parser.add_argument("--probes-only", action="store_true")
    parser.add_argument("--probe", action="append", help="run only probes with this prefix")
    parser.add_argument("--websockets-dir", type=Path, default=LIBRARY_DIR)
    parser.add_argument("--workdir", type=Path, help="keep the agents' logs here")
    print(json.dumps(asyncio.run(main(parser.parse_args())), indent=2))
