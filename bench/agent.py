"""Agent benchmark on localhost: prints one JSON object.

Runs the real agent as a subprocess (``python -m adare_guest``) and measures, in
the same run, each figure beside the baseline it is compared to:

- tool round trip (``get_timestamp``) p50/p99 beside a bare WebSocket ping/pong;
- ``execute_shell("true")`` beside a local ``subprocess.run(["true"])``;
- pull of a 64 MiB file (1 MiB chunks; one at a time and 8 in flight) MB/s beside a
  local ``cat file > /dev/null``;
- snapshot files/s of ``/usr`` beside ``find /usr -printf ...`` of the same fields;
- serial round trip (``ping`` and ``get_timestamp``) over a socat pty, when available;
- ``host_client``: the same through the project's own host client (``AsyncGuest``):
  binary pull and push of 64 MiB beside one sha256 + one copy of the file, the
  ``fs_snapshot`` of ``/usr`` beside ``find``, the round trip beside a bare WebSocket
  ping, ``shell("true")`` beside a local spawn;
- ``sync_guest``: the same through the synchronous ``Guest`` a test's ``guest`` fixture
  is (each call a hop to the shared loop thread and back), beside the same floors
  measured in its run; three rounds of the transfers, each sample kept;
- ``serial_throughput``: a pull over the serial link beside the raw pty/socket pair.

The agent runs as images deploy it (``agent_config``: its log level, a config file).

    python bench/agent.py [--rounds 300] [--no-serial]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import hashlib
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from websockets.asyncio.client import ClientConnection, connect

REPO = Path(__file__).resolve().parents[1]
TOKEN = "bench-token"
sys.path.insert(0, str(REPO))
from pytest_adare.agent.install import AGENT_LOG_LEVEL  # noqa: E402 (after the path)

LOG_LEVEL = os.environ.get("ADARE_BENCH_LOG_LEVEL", AGENT_LOG_LEVEL)
"""The agent's log level: as every VM deploys it, unless the environment says otherwise."""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _stats_ms(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50_ms": round(statistics.median(ordered) * 1000, 3),
        "p99_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000, 3),
        "n": len(ordered),
    }


class Client:
    """A minimal protocol client (one call at a time)."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.counter = 0

    async def call(self, tool: str, **params: Any) -> dict[str, Any]:
        self.counter += 1
        call_id = f"b{self.counter}"
        await self.ws.send(
            json.dumps(
                {
                    "type": "tool_call",
                    "id": call_id,
                    "timestamp": None,
                    "tool": tool,
                    "params": params,
                }
            )
        )
        while True:
            msg = json.loads(await self.ws.recv())
            if msg["type"] == "tool_result" and msg["id"] == call_id:
                if not msg["success"]:
                    raise RuntimeError(f"{tool}: {msg['error']}")
                return dict(msg["result"])

    async def call_many(self, tool: str, params_list: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Send all calls at once (pipelined), then collect the results in call order."""
        ids = []
        for params in params_list:
            self.counter += 1
            ids.append(f"b{self.counter}")
            await self.ws.send(
                json.dumps(
                    {
                        "type": "tool_call",
                        "id": ids[-1],
                        "timestamp": None,
                        "tool": tool,
                        "params": params,
                    }
                )
            )
        results: dict[str, dict[str, Any]] = {}
        while len(results) < len(ids):
            msg = json.loads(await self.ws.recv())
            if msg["type"] == "tool_result" and msg["id"] in ids:
                if not msg["success"]:
                    raise RuntimeError(f"{tool}: {msg['error']}")
                results[msg["id"]] = msg["result"]
        return [results[i] for i in ids]


async def _timed(func: Callable[[], Awaitable[Any]], rounds: int) -> list[float]:
    samples = []
    for _ in range(rounds):
        started = time.perf_counter()
        await func()
        samples.append(time.perf_counter() - started)
    return samples


@contextlib.asynccontextmanager
async def running_agent(run_dir: Path, serial: str | None) -> AsyncIterator[int]:
    """The agent's port, once it listens."""
    async with agent_process(run_dir, serial) as (port, _pid):
        yield port


@contextlib.asynccontextmanager
async def agent_process(run_dir: Path, serial: str | None) -> AsyncIterator[tuple[int, int]]:
    """``python -m adare_guest`` on a free port: (port, pid) once it listens."""
    port = _free_port()
    (run_dir / "config.json").write_text(
        json.dumps({"token": TOKEN, "logfile": str(run_dir / "agent.log"), "log_level": LOG_LEVEL})
    )
    argv = [
        sys.executable,
        "-m",
        "adare_guest",
        str(run_dir),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    if serial:
        argv += ["--serial", serial]
    proc = await asyncio.create_subprocess_exec(*argv, cwd=REPO)
    try:
        for _ in range(600):
            try:
                _reader, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.close()
                await writer.wait_closed()
                break
            except OSError:
                await asyncio.sleep(0.05)
        yield port, proc.pid
    finally:
        proc.terminate()
        try:
            await asyncio.wait_for(proc.wait(), 15)
        except TimeoutError:
            proc.kill()
            await proc.wait()


async def _connect(port: int) -> ClientConnection:
    for _ in range(300):
        try:
            ws = await connect(
                f"ws://127.0.0.1:{port}",
                additional_headers={"Authorization": f"Bearer {TOKEN}"},
                max_size=None,
                compression=None,
            )
            await ws.recv()  # welcome
            return ws
        except OSError:
            await asyncio.sleep(0.1)
    raise TimeoutError(f"agent did not listen on 127.0.0.1:{port} within 30 s")


async def bench_round_trip(client: Client, rounds: int) -> dict[str, Any]:
    for _ in range(20):
        await client.call("get_timestamp")
    tool = await _timed(lambda: client.call("get_timestamp"), rounds)

    async def ws_ping() -> None:
        await (await client.ws.ping())

    bare = await _timed(ws_ping, rounds)
    return {"get_timestamp": _stats_ms(tool), "baseline_websocket_ping": _stats_ms(bare)}


async def bench_shell(client: Client, rounds: int) -> dict[str, Any]:
    shell = await _timed(lambda: client.call("execute_shell", shell_command="true"), rounds)

    async def local() -> None:
        await asyncio.to_thread(subprocess.run, ["true"], check=True)

    return {
        "execute_shell_true": _stats_ms(shell),
        "baseline_local_subprocess_true": _stats_ms(await _timed(local, rounds)),
    }


def _seconds_to_cat(path: Path) -> float:
    started = time.perf_counter()
    subprocess.run(["cat", str(path)], stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - started


def _find_printf(root: str) -> tuple[int, float]:
    """Entries and seconds of ``find -printf`` printing the snapshot's fields."""
    started = time.perf_counter()
    find = subprocess.run(
        ["find", root, "-xdev", "-printf", "%p|%y|%s|%T@|%A@|%C@|%m|%U|%G|%i|%l\\n"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        check=False,
    )
    return find.stdout.count(b"\n"), time.perf_counter() - started


async def bench_pull(client: Client, workdir: Path) -> dict[str, Any]:
    path = workdir / "pull.bin"
    data = os.urandom(64 * 1024 * 1024)
    path.write_bytes(data)
    started = time.perf_counter()
    received = hashlib.sha256()
    index = 0
    while True:
        chunk = await client.call("pull_file_chunk", guest_path=str(path), chunk_index=index)
        received.update(base64.b64decode(chunk["chunk_data"]))
        if chunk["eof"]:
            break
        index += 1
    elapsed = time.perf_counter() - started
    assert chunk["sha256"] == received.hexdigest() == hashlib.sha256(data).hexdigest()
    started = time.perf_counter()
    pipelined = hashlib.sha256()
    for first in range(0, 64, 8):
        batch = [{"guest_path": str(path), "chunk_index": i} for i in range(first, first + 8)]
        for chunk in await client.call_many("pull_file_chunk", batch):
            pipelined.update(base64.b64decode(chunk["chunk_data"]))
    pipelined_elapsed = time.perf_counter() - started
    assert pipelined.hexdigest() == received.hexdigest()
    cat_elapsed = _seconds_to_cat(path)
    return {
        "pull_64mib_mb_per_s": round(64 / elapsed, 1),
        "pull_64mib_8_in_flight_mb_per_s": round(64 / pipelined_elapsed, 1),
        "baseline_local_cat_mb_per_s": round(64 / cat_elapsed, 1),
    }


async def bench_snapshot(client: Client) -> dict[str, Any]:
    started = time.perf_counter()
    result = await client.call("get_filesystem_snapshot", root_path="/usr", timeout=600)
    elapsed = time.perf_counter() - started
    find_count, find_elapsed = _find_printf("/usr")

    return {
        "snapshot_usr_entries": result["file_count"],
        "snapshot_usr_files_per_s": round(result["file_count"] / elapsed),
        "snapshot_usr_seconds": round(elapsed, 3),
        "baseline_find_printf_entries": find_count,
        "baseline_find_printf_files_per_s": round(find_count / find_elapsed),
        "baseline_find_printf_seconds": round(find_elapsed, 3),
    }


def _hash_and_copy_seconds(source: Path, target: Path) -> float:
    """The floor of a verified transfer: one sha256 of the file and one copy of it, in
    1 MiB pieces (what a zero-overhead pull or push must do at least)."""
    started = time.perf_counter()
    digest = hashlib.sha256()
    buffer = bytearray(1 << 20)
    view = memoryview(buffer)
    with source.open("rb", buffering=0) as src, target.open("wb", buffering=0) as out:
        while n := src.readinto(buffer):
            digest.update(view[:n])
            out.write(view[:n])
    elapsed = time.perf_counter() - started
    target.unlink()
    return elapsed


async def bench_host_client(port: int, workdir: Path, rounds: int) -> dict[str, Any]:
    """The figures through the project's own host client (``AsyncGuest`` over
    ``AgentClient``), each beside its floor measured in the same run, three times
    interleaved (medians): the load of a shared machine hits both alike."""
    from pytest_adare.agent.websocket_client import AgentClient
    from pytest_adare.guest import AsyncGuest

    source = workdir / "client.bin"
    source.write_bytes(os.urandom(64 * 1024 * 1024))
    mib = source.stat().st_size / 1e6
    client = await AgentClient.connect("127.0.0.1", port, TOKEN)
    ws = await _connect(port)
    try:
        guest = AsyncGuest(client)
        pulls, pushes, floors, snaps, finds = [], [], [], [], []
        for _ in range(3):
            started = time.perf_counter()
            await guest.pull(str(source), workdir / "pulled.bin")
            pulls.append(time.perf_counter() - started)
            assert (workdir / "pulled.bin").read_bytes() == source.read_bytes()
            (workdir / "pulled.bin").unlink()
            started = time.perf_counter()
            await guest.push(source, str(workdir / "pushed.bin"))
            pushes.append(time.perf_counter() - started)
            assert (workdir / "pushed.bin").read_bytes() == source.read_bytes()
            (workdir / "pushed.bin").unlink()
            floors.append(_hash_and_copy_seconds(source, workdir / "copy.bin"))
            started = time.perf_counter()
            snapshot = await guest.fs_snapshot("/usr", timeout=600)
            snaps.append(time.perf_counter() - started)
            finds.append(_find_printf("/usr")[1])
        for _ in range(20):
            await guest.call("get_timestamp")
        tool = await _timed(lambda: guest.call("get_timestamp"), rounds)

        async def ws_ping() -> None:
            await (await ws.ping())

        bare = await _timed(ws_ping, rounds)
        shell = await _timed(lambda: guest.shell("true"), max(50, rounds // 3))

        async def local() -> None:
            await asyncio.to_thread(subprocess.run, ["true"], check=True)

        spawn = await _timed(local, max(50, rounds // 3))
    finally:
        await ws.close()
        await client.close()
        source.unlink()
    median = statistics.median
    return {
        "pull_64mib_mb_per_s": round(mib / median(pulls), 1),
        "push_64mib_mb_per_s": round(mib / median(pushes), 1),
        "floor_sha256_and_copy_mb_per_s": round(mib / median(floors), 1),
        "snapshot_usr_entries": len(snapshot),
        "snapshot_usr_s": round(median(snaps), 3),
        "floor_find_printf_s": round(median(finds), 3),
        "get_timestamp": _stats_ms(tool),
        "floor_websocket_ping": _stats_ms(bare),
        "execute_shell_true": _stats_ms(shell),
        "floor_local_subprocess_true": _stats_ms(spawn),
    }


def _spread(samples: list[float], digits: int = 3) -> dict[str, Any]:
    """A few samples: their median and each one (the spread a reader can judge)."""
    return {"median": round(statistics.median(samples), digits),
            "samples": [round(s, digits) for s in samples]}  # fmt: skip


def bench_sync_guest(port: int, workdir: Path, rounds: int) -> dict[str, Any]:
    """The figures a test sees: the synchronous ``Guest`` over ``AgentClient`` (every call
    run on the shared loop thread from this one), each beside its floor, interleaved."""
    from pytest_adare.agent.websocket_client import AgentClient
    from pytest_adare.guest import AsyncGuest, Guest
    from pytest_adare.loop_thread import shared_loop

    source = workdir / "sync.bin"
    source.write_bytes(os.urandom(64 * 1024 * 1024))
    mib = source.stat().st_size / 1e6
    loop = shared_loop()
    client = loop.run(AgentClient.connect("127.0.0.1", port, TOKEN), timeout=60)
    ws = loop.run(_connect(port), timeout=60)
    guest = Guest(AsyncGuest(client))

    def timed(func: Callable[[], Any], n: int) -> list[float]:
        samples = []
        for _ in range(n):
            started = time.perf_counter()
            func()
            samples.append(time.perf_counter() - started)
        return samples

    async def ws_ping() -> None:
        await (await ws.ping())

    try:
        pulls, floors, snaps, finds = [], [], [], []
        for _ in range(3):
            started = time.perf_counter()
            guest.pull(str(source), workdir / "pulled.bin")
            pulls.append(mib / (time.perf_counter() - started))
            assert (workdir / "pulled.bin").read_bytes() == source.read_bytes()
            (workdir / "pulled.bin").unlink()
            floors.append(mib / _hash_and_copy_seconds(source, workdir / "copy.bin"))
            started = time.perf_counter()
            guest.fs_snapshot("/usr", timeout=600)
            snaps.append(time.perf_counter() - started)
            finds.append(_find_printf("/usr")[1])
        timed(lambda: guest.call("get_timestamp"), 20)
        # The floor as a test would see it too: a ping sent from this thread.
        tool = timed(lambda: guest.call("get_timestamp"), rounds)
        bare = timed(lambda: loop.run(ws_ping(), timeout=30), rounds)
        shell = timed(lambda: guest.shell("true"), max(50, rounds // 3))
        spawn = timed(lambda: subprocess.run(["true"], check=True), max(50, rounds // 3))
    finally:
        loop.run(ws.close(), timeout=30)
        loop.run(client.close(), timeout=30)
        source.unlink()
    return {
        "pull_64mib_mb_per_s": _spread(pulls, 1),
        "floor_sha256_and_copy_mb_per_s": _spread(floors, 1),
        "snapshot_usr_s": _spread(snaps),
        "floor_find_printf_s": _spread(finds),
        "get_timestamp": _stats_ms(tool),
        "floor_websocket_ping": _stats_ms(bare),
        "execute_shell_true": _stats_ms(shell),
        "floor_local_subprocess_true": _stats_ms(spawn),
    }


async def bench_serial_throughput(workdir: Path) -> dict[str, Any]:
    """A pull over the serial link (AsyncGuest over the serial client, socat pty) beside
    the raw pty/socket pair it rides: the same bytes written into the socket and read
    from the pty, no link layer."""
    from pytest_adare.agent.serial_client import SerialAgentClient
    from pytest_adare.guest import AsyncGuest

    if shutil.which("socat") is None:
        return {"skipped": "socat not installed"}
    size = 4 * 1024 * 1024
    source = workdir / "serial.bin"
    source.write_bytes(os.urandom(size))
    raw = await _raw_pty_seconds(workdir, size)
    async with _socat_pty(workdir, "link") as (sock, pty):
        serial_dir = workdir / "serial-throughput"
        serial_dir.mkdir()
        async with running_agent(serial_dir, str(pty)):
            client = await SerialAgentClient.connect(sock, timeout=30)
            try:
                started = time.perf_counter()
                await AsyncGuest(client).pull(str(source), workdir / "serial-pulled.bin")
                pulled = time.perf_counter() - started
            finally:
                await client.close()
    assert (workdir / "serial-pulled.bin").read_bytes() == source.read_bytes()
    return {
        "pull_4mib_mb_per_s": round(size / 1e6 / pulled, 2),
        "floor_raw_pty_socket_mb_per_s": round(size / 1e6 / raw, 2),
    }


@contextlib.asynccontextmanager
async def _socat_pty(workdir: Path, name: str) -> AsyncIterator[tuple[Path, Path]]:
    sock, pty = workdir / f"{name}.sock", workdir / f"{name}.pty"
    socat = await asyncio.create_subprocess_exec(
        "socat", f"UNIX-LISTEN:{sock}", f"PTY,link={pty},raw,echo=0", stderr=subprocess.DEVNULL
    )
    try:
        for _ in range(200):
            if pty.exists() and sock.exists():
                break
            await asyncio.sleep(0.05)
        yield sock, pty
    finally:
        if socat.returncode is None:
            socat.terminate()
            await socat.wait()


async def _raw_pty_seconds(workdir: Path, size: int) -> float:
    """Seconds to move ``size`` bytes from the socket end to the pty end of socat."""
    async with _socat_pty(workdir, "raw") as (sock, pty):
        reader, writer = await asyncio.open_unix_connection(str(sock))
        for _ in range(200):  # socat opens the pty once the socket is connected
            if pty.exists():
                break
            await asyncio.sleep(0.05)
        fd = os.open(pty, os.O_RDWR | os.O_NOCTTY)
        try:
            got = 0

            def drain() -> None:
                nonlocal got
                while got < size:
                    got += len(os.read(fd, 1 << 20))

            started = time.perf_counter()
            pump = asyncio.create_task(asyncio.to_thread(drain))
            writer.write(os.urandom(size))
            await writer.drain()
            await asyncio.wait_for(pump, 120)
            elapsed = time.perf_counter() - started
            writer.close()
            await writer.wait_closed()
            del reader
        finally:
            os.close(fd)
    return elapsed


async def bench_serial(workdir: Path, rounds: int) -> dict[str, Any]:
    try:
        from pytest_adare.agent.serial_client import SerialAgentClient
    except ImportError as exc:
        return {"skipped": f"serial client unavailable: {exc}"}
    if shutil.which("socat") is None:
        return {"skipped": "socat not installed"}
    sock = workdir / "serial.sock"
    pty = workdir / "serial.pty"
    socat = await asyncio.create_subprocess_exec(
        "socat",
        f"UNIX-LISTEN:{sock}",
        f"PTY,link={pty},raw,echo=0",
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(100):
            if pty.exists() and sock.exists():
                break
            await asyncio.sleep(0.05)
        serial_dir = workdir / "serial-run"
        serial_dir.mkdir()
        async with running_agent(serial_dir, str(pty)):
            client = await SerialAgentClient.connect(sock, timeout=30)
            try:
                ping = await _timed(client.ping_connected, rounds)
                call = await _timed(lambda: client.call("get_timestamp", {}), rounds)
            finally:
                await client.close()
        return {"serial_ping": _stats_ms(ping), "serial_get_timestamp": _stats_ms(call)}
    finally:
        if socat.returncode is None:
            socat.terminate()
            await socat.wait()


async def main(rounds: int, serial: bool) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="adare-bench-") as tmp:
        workdir = Path(tmp)
        run_dir = workdir / "run"
        run_dir.mkdir()
        report: dict[str, Any] = {
            "host": "localhost",
            "python": sys.version.split()[0],
            "agent_config": {"log_level": LOG_LEVEL, "deployed": LOG_LEVEL == AGENT_LOG_LEVEL},
        }
        async with running_agent(run_dir, None) as port:
            ws = await _connect(port)
            client = Client(ws)
            try:
                report["round_trip"] = await bench_round_trip(client, rounds)
                report["shell"] = await bench_shell(client, max(50, rounds // 3))
                report["pull"] = await bench_pull(client, workdir)
                report["snapshot"] = await bench_snapshot(client)
            finally:
                await ws.close()
            report["host_client"] = await bench_host_client(port, workdir, rounds)
            report["sync_guest"] = await asyncio.to_thread(bench_sync_guest, port, workdir, rounds)
        if serial:
            report["serial"] = await bench_serial(workdir, max(20, rounds // 10))
            report["serial_throughput"] = await bench_serial_throughput(workdir)
        return report


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--no-serial", action="store_true")
    args = parser.parse_args()
    print(json.dumps(asyncio.run(main(args.rounds, not args.no_serial)), indent=2))
