"""Client for the QEMU guest agent (``qemu-ga``) on its virtio-serial chardev socket.

The async core (:class:`AsyncQGAClient`) lives on the shared loop; :class:`QGAClient`
is its sync face (``shared_loop().run(...)``). QGA has no request ids and keeps no
framing after a host reconnect, so every session starts with ``guest-sync-delimited``:
the 0xFF byte makes ``qemu-ga`` drop any half-read input, and the reply (preceded by
0xFF) tells where stale output ends.

Example::

    qga = QGAClient(machine.qga_path)
    qga.sync(timeout=60)                    # waits for the guest's qemu-ga to answer
    result = qga.exec(["sh", "-c", "echo hi"])
    assert result.stdout == b"hi\\n"
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pytest_adare.errors import QGAError
from pytest_adare.loop_thread import SyncTwin, sync_twin

T = TypeVar("T")

CHUNK_SIZE = 1024 * 1024
_DELIMITER = b"\xff"
_LINE_LIMIT = 64 * 1024 * 1024


@dataclass(frozen=True)
class QGAExecResult:
    """A finished ``guest-exec``: exit code (negative signal number if killed), output."""

    exitcode: int
    stdout: bytes
    stderr: bytes


class AsyncQGAClient:
    """One connection to ``qemu-ga``; commands are serialised (QGA answers in order)."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._lock = asyncio.Lock()

    async def close(self) -> None:
        """Close the connection (the next command reconnects and resyncs)."""
        writer, self._reader, self._writer = self._writer, None, None
        if writer is not None:
            writer.close()
            with contextlib.suppress(OSError, ConnectionError):
                await writer.wait_closed()

    async def sync(self, timeout: float = 60.0) -> None:
        """Connect (if needed) and resynchronise, retrying until ``qemu-ga`` answers.

        :raise QGAError: no answer within ``timeout`` seconds.
        """
        async with self._lock:
            await self._sync_locked(timeout)

    async def _sync_locked(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last_error = "no answer"
        while (left := deadline - time.monotonic()) > 0:
            try:
                await self._connect()
                await asyncio.wait_for(self._sync_once(), min(left, 2.0))
                return
            except (asyncio.TimeoutError, OSError, ConnectionError, ValueError) as exc:
                last_error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
                if not isinstance(exc, asyncio.TimeoutError):
                    await self.close()
                    await asyncio.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
        raise QGAError(
            f"qemu-ga at {self.path} did not answer guest-sync-delimited within "
            f"{timeout:.1f} s (last: {last_error})"
        )

    async def _connect(self) -> None:
        if self._writer is None:
            self._reader, self._writer = await asyncio.open_unix_connection(
                str(self.path), limit=_LINE_LIMIT
            )

    async def _sync_once(self) -> None:
        assert self._reader is not None and self._writer is not None
        token = random.randrange(1, 2**31)
        request = {"execute": "guest-sync-delimited", "arguments": {"id": token}}
        self._writer.write(_DELIMITER + json.dumps(request).encode() + b"\n")
        await self._writer.drain()
        while True:
            await self._reader.readuntil(_DELIMITER)
            line = await self._reader.readline()
            with contextlib.suppress(ValueError):
                if json.loads(line).get("return") == token:
                    return

    async def execute(
        self, command: str, arguments: Mapping[str, Any] | None = None, timeout: float = 30.0
    ) -> Any:
        """Run one QGA command and return its ``return`` value.

        :raise QGAError: QGA reported an error, or no answer within ``timeout`` s.
        """
        async with self._lock:
            if self._writer is None:
                await self._sync_locked(timeout)
            try:
                return await asyncio.wait_for(self._roundtrip(command, arguments), timeout)
            except asyncio.TimeoutError:
                await self.close()  # a late answer would be taken for the next one's
                raise QGAError(f"qemu-ga did not answer {command} within {timeout:.1f} s") from None
            except (OSError, ConnectionError, asyncio.IncompleteReadError) as exc:
                await self.close()
                raise QGAError(f"connection to qemu-ga lost during {command}: {exc}") from exc

    async def _roundtrip(self, command: str, arguments: Mapping[str, Any] | None) -> Any:
        assert self._reader is not None and self._writer is not None
        request: dict[str, Any] = {"execute": command}
        if arguments:
            request["arguments"] = dict(arguments)
        self._writer.write(json.dumps(request).encode() + b"\n")
        await self._writer.drain()
        while True:
            line = (await self._reader.readline()).strip(b"\xff \r\n")
            if not line:
                if self._reader.at_eof():
                    raise ConnectionError("qemu-ga socket closed")
                continue
            reply = json.loads(line)
            if "error" in reply:
                error = reply["error"]
                raise QGAError(f"{command} failed: {error.get('class')}: {error.get('desc')}")
            if "return" in reply:
                return reply["return"]

    async def ping(self, timeout: float = 10.0) -> None:
        """``guest-ping``: qemu-ga is alive."""
        await self.execute("guest-ping", None, timeout)

    async def spawn(
        self, argv: Sequence[str], env: Sequence[str] = (), timeout: float = 30.0
    ) -> int:
        """Start ``argv`` in the guest without waiting for it; returns its guest pid."""
        reply = await self.execute("guest-exec", _exec_args(argv, env, capture=False), timeout)
        return int(reply["pid"])

    async def exec(
        self,
        argv: Sequence[str],
        *,
        input_data: bytes | None = None,
        env: Sequence[str] = (),
        timeout: float = 60.0,
    ) -> QGAExecResult:
        """Run ``argv`` in the guest and wait (at most ``timeout`` s) for its result.

        :raise QGAError: QGA failed, or the command still ran after ``timeout`` s.
        """
        args = _exec_args(argv, env, capture=True)
        if input_data is not None:
            args["input-data"] = base64.b64encode(input_data).decode()
        deadline = time.monotonic() + timeout
        pid = int((await self.execute("guest-exec", args, timeout))["pid"])
        delay = 0.005
        while True:
            status = await self.execute("guest-exec-status", {"pid": pid}, timeout)
            if status.get("exited"):
                return _exec_result(status)
            if time.monotonic() + delay > deadline:
                raise QGAError(f"guest command {list(argv)!r} still running after {timeout:.1f} s")
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.2)

    async def file_write(
        self, guest_path: str, data: bytes, *, mode: str = "wb", timeout: float = 120.0
    ) -> None:
        """Write ``data`` to ``guest_path`` in 1 MiB chunks (``mode`` ``wb`` or ``ab``)."""
        deadline = time.monotonic() + timeout
        handle = await self._open(guest_path, mode, timeout)
        try:
            for start in range(0, len(data), CHUNK_SIZE):
                chunk = base64.b64encode(data[start : start + CHUNK_SIZE]).decode()
                await self.execute(
                    "guest-file-write",
                    {"handle": handle, "buf-b64": chunk},
                    _left(deadline, f"writing {guest_path}"),
                )
        finally:
            await self._close_handle(handle)

    async def file_read(self, guest_path: str, *, timeout: float = 120.0) -> bytes:
        """The whole content of ``guest_path``, read in 1 MiB chunks."""
        deadline = time.monotonic() + timeout
        handle = await self._open(guest_path, "rb", timeout)
        parts: list[bytes] = []
        try:
            while True:
                reply = await self.execute(
                    "guest-file-read",
                    {"handle": handle, "count": CHUNK_SIZE},
                    _left(deadline, f"reading {guest_path}"),
                )
                parts.append(base64.b64decode(reply.get("buf-b64", "")))
                if reply.get("eof") or not reply.get("count"):
                    return b"".join(parts)
        finally:
            await self._close_handle(handle)

    async def _open(self, guest_path: str, mode: str, timeout: float) -> int:
        return int(
            await self.execute("guest-file-open", {"path": guest_path, "mode": mode}, timeout)
        )

    async def _close_handle(self, handle: int) -> None:
        with contextlib.suppress(QGAError):
            await self.execute("guest-file-close", {"handle": handle}, 10.0)


def _exec_args(argv: Sequence[str], env: Sequence[str], *, capture: bool) -> dict[str, Any]:
    if not argv:
        raise ValueError("guest-exec needs a command")
    args: dict[str, Any] = {"path": argv[0], "arg": list(argv[1:]), "capture-output": capture}
    if env:
        args["env"] = list(env)
    return args


def _left(deadline: float, what: str) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise QGAError(f"ran out of time {what}")
    return left


def _exec_result(status: Mapping[str, Any]) -> QGAExecResult:
    exitcode = int(status["exitcode"]) if "exitcode" in status else -int(status.get("signal", 0))
    return QGAExecResult(
        exitcode=exitcode,
        stdout=base64.b64decode(status.get("out-data", "")),
        stderr=base64.b64decode(status.get("err-data", "")),
    )


class QGAClient(SyncTwin[AsyncQGAClient]):
    """Sync face of :class:`AsyncQGAClient` (same methods; ``aio`` is the async core)."""

    def __init__(self, path: Path | str) -> None:
        self.aio = AsyncQGAClient(path)

    def __enter__(self) -> QGAClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    sync = sync_twin(AsyncQGAClient.sync)
    ping = sync_twin(AsyncQGAClient.ping)
    execute = sync_twin(AsyncQGAClient.execute)
    exec = sync_twin(AsyncQGAClient.exec)
    spawn = sync_twin(AsyncQGAClient.spawn)
    file_write = sync_twin(AsyncQGAClient.file_write)
    file_read = sync_twin(AsyncQGAClient.file_read)
    close = sync_twin(AsyncQGAClient.close)
