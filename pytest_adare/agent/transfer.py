"""File transfer: binary messages when the agent offers them, else JSON chunks.

**Binary** (``pull_file`` / ``push_file`` tools, docs/agent.md "Binary transfer"): a JSON
call announces the transfer (size, a transfer id the host chose), the bytes travel as
binary messages of :mod:`adare_guest.binary_transfer` of :data:`BINARY_CHUNK` bytes,
with :data:`BINARY_PULL_WINDOW` (:data:`BINARY_PUSH_WINDOW`) of them unacknowledged at
most, and the whole file's sha256, computed by the sender while it streams, ends it.
The receiver checks each offset and length against the announced size before it
writes a byte, and its own running hash against the sender's.

**JSON chunks** (``pull_file_chunk`` / ``push_file_chunk``, the reference host's form,
for agents without the binary tools). A pull asks for chunk 0 first (it carries the
file size and chunk count), then keeps :data:`PULL_WINDOW` chunk requests in flight and
writes each chunk at its offset as it arrives, into a hidden ``.part`` file that is
renamed over the target only when the host's sha256 of the whole file equals the
guest's. Everything the guest says about the file is untrusted: sizes, chunk indexes
and lengths are checked against each other before any byte is written, so a lying
guest cannot make the host write or hash more than the size it announced.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import hashlib
import os
import secrets
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol, TypeVar

from adare_guest.binary_transfer import (
    DIGEST_SIZE,
    MAX_REASON,
    FrameKind,
    TransferFrame,
    cancel_frame,
    encode_transfer_frame,
)
from adare_guest.tool_names import PULL_FILE, PULL_FILE_CHUNK, PUSH_FILE, PUSH_FILE_CHUNK
from pytest_adare.agent.connection import AgentConnection, BinaryTransport
from pytest_adare.agent.pull_writer import PullWriter
from pytest_adare.agent.transfer_stream import TransferStream
from pytest_adare.errors import AgentDisconnected, ToolError, VMTimeout
from pytest_adare.file_hash import file_sha256

_T = TypeVar("_T")
ProgressCallback = Callable[[int, int], None]
"""Called as ``progress(bytes_done, bytes_total)`` during a file transfer."""

PULL_CHUNK = 2 * 1024 * 1024
PUSH_CHUNK = 4 * 1024 * 1024  # 5.4 MiB as base64: well under the 16 MiB message limit
BINARY_CHUNK = 1024 * 1024
"""Bytes per binary data message (measured under TCG: 1 MiB beat 2, 4 and 8 MiB)."""
BINARY_PULL_WINDOW = 8
"""Data messages the agent may have in flight (sent, not yet acknowledged) in a pull."""
BINARY_PUSH_WINDOW = 4
"""Data messages the host keeps in flight in a push: the agent's keepalive pong queues
behind them, and a TCG guest unmasks WebSocket frames in pure Python (slowly), so what
waits ahead of it stays within a few MiB."""
BINARY_FRAME_TIMEOUT = 120.0
"""Seconds a binary transfer waits for the agent's next message (a TCG guest may be slow:
the last one of a push follows an fsync)."""
BINARY_TOOLS = (PULL_FILE, PUSH_FILE)
DEFAULT_PULL_MAX_BYTES = 4 * 1024**3
"""Largest file ``pull`` takes by default (``max_bytes=``): a bigger announced size is
refused before a byte is written, so a guest cannot fill the host's disk."""
PULL_GRACE = 120.0
"""Seconds a pull may take on top of its size at :data:`PULL_MIN_RATE`."""
PULL_MIN_RATE = 256 * 1024
"""Bytes per second a pull must average (with :data:`PULL_GRACE`): a guest that sends
one byte a minute cannot hold it forever. Measured pulls under TCG run at MiB/s."""
PULL_WINDOW = 3  # chunk requests in flight at once (guest memory: several chunk sizes each)
# 2 MiB x 3 measured as fast as 4 MiB x 2 under TCG with half the guest memory; an
# 8 MiB chunk x 2 got the agent killed in a 256 MiB guest.


class CheckedCall(Protocol):
    """A tool call whose ``status: error`` results raise :class:`ToolError`."""

    def __call__(self, tool: str, /, **params: Any) -> Awaitable[dict[str, Any]]: ...


async def pull_file(
    call: CheckedCall,
    guest_path: str,
    host_path: str | os.PathLike[str],
    *,
    progress: ProgressCallback | None = None,
    chunk_size: int | None = None,
    binary: BinaryTransport | None = None,
    max_bytes: int = DEFAULT_PULL_MAX_BYTES,
    timeout: float | None = None,
) -> Path:
    """Copy a guest file to ``host_path``: chunked, sha256-verified, atomic on the host.

    With ``binary`` (see :func:`binary_transport`) the bytes travel in binary messages
    (``chunk_size`` default :data:`BINARY_CHUNK`), else as base64 JSON chunks (default
    :data:`PULL_CHUNK`). A file the guest announces above ``max_bytes`` is refused
    before a byte is written; the whole pull ends after ``timeout`` seconds (default:
    :data:`PULL_GRACE` plus the announced size at :data:`PULL_MIN_RATE`). Nothing of a
    refused or unfinished pull stays on the host.

    :raise ToolError: the guest file cannot be read, is a directory, is above
        ``max_bytes``, the guest's chunk layout does not add up, or the hash differs.
    :raise VMTimeout: the pull did not finish within ``timeout``.
    """
    if max_bytes < 0:
        raise ValueError(f"max_bytes must be at least 0, got {max_bytes}")
    target = Path(host_path)
    budget = _PullBudget(guest_path, max_bytes, timeout)
    if binary is not None:
        per_message = chunk_size or BINARY_CHUNK
        return await _pull_binary(call, binary, guest_path, target, progress, per_message, budget)
    chunk_size = chunk_size or PULL_CHUNK

    async def chunk(index: int) -> dict[str, Any]:
        return await call(
            PULL_FILE_CHUNK, guest_path=guest_path, chunk_index=index, chunk_size=chunk_size
        )

    first = await chunk(0)
    if first.get("is_directory"):
        raise ToolError(PULL_FILE_CHUNK, f"{guest_path!r} is a directory in the guest", first)
    total_chunks, file_size = chunk_layout(guest_path, first, chunk_size)
    budget.admit(PULL_FILE_CHUNK, file_size)
    part = target.with_name(f".{target.name}.{secrets.token_hex(8)}.part")
    target.parent.mkdir(parents=True, exist_ok=True)
    # "x": never open a file that exists (a pulled guest file of that name, or a link);
    # opened before the try so a name we did not create is never removed.
    out = part.open("xb")
    try:
        with out:
            done = 0

            def write(answer: dict[str, Any], index: int) -> None:
                nonlocal done
                data = chunk_data(guest_path, answer, index, chunk_size, file_size)
                out.seek(index * chunk_size)
                out.write(data)
                done += len(data)
                if progress is not None:
                    progress(done, file_size)

            write(first, 0)
            last = await budget.bound(_pull_window(chunk, first, total_chunks, write))
        sha256 = last.get("sha256")
        if not isinstance(sha256, str) or not sha256:
            raise ToolError(PULL_FILE_CHUNK, f"{guest_path!r}: last chunk has no sha256", None)
        actual = await asyncio.to_thread(file_sha256, part)
        if actual != sha256:
            raise ToolError(
                PULL_FILE_CHUNK,
                f"{guest_path!r}: sha256 mismatch (guest {sha256}, host {actual})",
                None,
            )
        os.replace(part, target)
    finally:
        part.unlink(missing_ok=True)
    return target


class _PullBudget:
    """What one pull may cost: ``max_bytes`` on disk, a deadline once the size is known."""

    def __init__(self, guest_path: str, max_bytes: int, timeout: float | None) -> None:
        self.guest_path = guest_path
        self.max_bytes = max_bytes
        self.timeout = timeout
        self.size = 0

    def admit(self, tool: str, size: int) -> None:
        """:raise ToolError: the announced ``size`` is above ``max_bytes``."""
        if size > self.max_bytes:
            raise ToolError(
                tool,
                f"{self.guest_path!r}: the guest announces {size} bytes, above "
                f"max_bytes={self.max_bytes} (pass a larger max_bytes= to pull it); "
                "nothing written",
                None,
            )
        self.size = size
        if self.timeout is None:
            self.timeout = PULL_GRACE + size / PULL_MIN_RATE

    async def bound(self, work: Awaitable[_T]) -> _T:
        """``work`` within the pull's deadline.

        :raise VMTimeout: it did not finish in time (saying how far it got).
        """
        assert self.timeout is not None, "admit() first"
        try:
            return await asyncio.wait_for(work, self.timeout)
        except asyncio.TimeoutError:
            raise VMTimeout(
                f"the pull of {self.guest_path!r} ({self.size} bytes; the deadline is "
                f"{PULL_GRACE:.0f} s plus {PULL_MIN_RATE // 1024} KiB/s, or timeout=)",
                self.timeout,
            ) from None


async def _pull_window(
    chunk: Callable[[int], Awaitable[dict[str, Any]]],
    first: dict[str, Any],
    total_chunks: int,
    write: Callable[[dict[str, Any], int], None],
) -> dict[str, Any]:
    """Fetch chunks 1.. with up to PULL_WINDOW requests in flight; the last chunk's answer.

    Chunks may finish out of order (the agent serves them concurrently), which is why
    each is written at its own offset. The first failure cancels the rest.
    """
    last = first
    indexes = iter(range(1, total_chunks))
    in_flight: dict[asyncio.Future[dict[str, Any]], int] = {}
    try:
        while True:
            while len(in_flight) < PULL_WINDOW and (i := next(indexes, None)) is not None:
                in_flight[asyncio.ensure_future(chunk(i))] = i
            if not in_flight:
                return last
            finished, _ = await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
            for task in finished:
                index = in_flight.pop(task)
                answer = task.result()
                write(answer, index)
                if index == total_chunks - 1:
                    last = answer
    finally:
        for task in in_flight:
            task.cancel()


async def push_file(
    call: CheckedCall,
    host_path: str | os.PathLike[str],
    guest_path: str,
    *,
    mode: int | None = None,
    progress: ProgressCallback | None = None,
    chunk_size: int | None = None,
    binary: BinaryTransport | None = None,
) -> None:
    """Copy a host file to ``guest_path`` (chunked; the agent verifies sha256, renames).

    With ``binary`` (see :func:`binary_transport`) the bytes travel in binary messages
    (``chunk_size`` default :data:`BINARY_CHUNK`), else as base64 JSON chunks (default
    :data:`PUSH_CHUNK`).

    :raise FileNotFoundError: ``host_path`` does not exist.
    :raise ToolError: the agent refused a chunk or the hash differed.
    """
    source = Path(host_path)
    if binary is not None:
        per_message = chunk_size or BINARY_CHUNK
        await _push_binary(call, binary, source, guest_path, mode, progress, per_message)
        return
    chunk_size = chunk_size or PUSH_CHUNK
    size, sha256 = await asyncio.to_thread(_size_and_sha256, source)
    total_chunks = max(1, -(-size // chunk_size))
    done = 0
    src = await asyncio.to_thread(source.open, "rb")
    try:
        for index in range(total_chunks):
            data = await asyncio.to_thread(src.read, chunk_size)
            params: dict[str, Any] = {
                "guest_path": guest_path,
                "chunk_index": index,
                "chunk_data": base64.b64encode(data).decode("ascii"),
                "total_chunks": total_chunks,
            }
            if index == total_chunks - 1:
                params["sha256"] = sha256
                if mode is not None:
                    params["mode"] = mode
            await call(PUSH_FILE_CHUNK, **params)
            done += len(data)
            if progress is not None:
                progress(done, size)
    finally:
        src.close()


def _size_and_sha256(path: Path) -> tuple[int, str]:
    return path.stat().st_size, file_sha256(path)


def chunk_layout(guest_path: str, first: dict[str, Any], chunk_size: int) -> tuple[int, int]:
    """(total_chunks, file_size) from chunk 0, checked for consistency: guest data is
    untrusted, and a lying size must not make the host write or hash gigabytes."""
    try:
        total_chunks, file_size = int(first["total_chunks"]), int(first.get("file_size", 0))
    except (KeyError, TypeError, ValueError, OverflowError):  # e.g. 1e400 reads as infinity
        raise ToolError(
            PULL_FILE_CHUNK, f"{guest_path!r}: chunk 0 has no valid size", None
        ) from None
    expected = max(1, -(-file_size // chunk_size)) if file_size >= 0 else -1
    if total_chunks != expected:
        raise ToolError(
            PULL_FILE_CHUNK,
            f"{guest_path!r}: guest reports {total_chunks} chunks for {file_size} bytes "
            f"(expected {expected} of {chunk_size} bytes)",
            None,
        )
    return total_chunks, file_size


def chunk_data(
    guest_path: str, chunk: dict[str, Any], index: int, chunk_size: int, file_size: int
) -> bytes:
    """The bytes of chunk ``index``, refused unless it is the chunk asked for, with the
    length the announced file size implies (the file changed, or the guest lies)."""
    if chunk.get("chunk_index") != index:
        raise ToolError(
            PULL_FILE_CHUNK,
            f"{guest_path!r}: asked for chunk {index}, got {chunk.get('chunk_index')!r}",
            None,
        )
    try:
        data = base64.b64decode(chunk.get("chunk_data") or "", validate=True)
    except (binascii.Error, ValueError, TypeError):  # TypeError: not text at all
        raise ToolError(
            PULL_FILE_CHUNK, f"{guest_path!r}: chunk {index} is not base64", None
        ) from None
    expected = min(chunk_size, file_size - index * chunk_size)
    if len(data) != expected:
        raise ToolError(
            PULL_FILE_CHUNK,
            f"{guest_path!r}: chunk {index} has {len(data)} bytes, expected {expected} "
            "(the file changed during the pull?)",
            None,
        )
    return data


# --------------------------------------------------------------------------- binary


def binary_transport(connection: AgentConnection) -> BinaryTransport | None:
    """``connection`` when it carries binary messages and the agent offers the binary
    tools (``server_info["tools"]``), else None (JSON chunks then)."""
    tools = connection.server_info.get("tools") or ()
    if isinstance(connection, BinaryTransport) and all(t in tools for t in BINARY_TOOLS):
        return connection
    return None


async def _pull_binary(
    call: CheckedCall,
    link: BinaryTransport,
    guest_path: str,
    target: Path,
    progress: ProgressCallback | None,
    chunk_size: int,
    budget: _PullBudget,
) -> Path:
    stream = link.open_stream(window=BINARY_PULL_WINDOW, max_payload=chunk_size)
    try:
        answer = await call(
            PULL_FILE,
            guest_path=guest_path,
            transfer_id=stream.transfer_id,
            chunk_size=chunk_size,
            window=BINARY_PULL_WINDOW,
        )
        size = _announced_size(guest_path, answer, stream, chunk_size)
        budget.admit(PULL_FILE, size)
        part = target.with_name(f".{target.name}.{secrets.token_hex(8)}.part")
        target.parent.mkdir(parents=True, exist_ok=True)
        out = part.open("xb")  # "x": never a name that exists (see pull_file)
        try:
            with out:
                await budget.bound(_receive_file(link, stream, guest_path, size, out, progress))
            os.replace(part, target)
        finally:
            part.unlink(missing_ok=True)
    except BaseException as exc:
        await _cancel(link, stream, f"the host gave up: {type(exc).__name__}")
        raise
    finally:
        link.close_stream(stream)
    return target


def _announced_size(
    guest_path: str, answer: dict[str, Any], stream: TransferStream, chunk_size: int
) -> int:
    """The file size of a ``pull_file`` answer, checked against what the host asked."""
    if answer.get("is_directory"):
        raise ToolError(PULL_FILE, f"{guest_path!r} is a directory in the guest", answer)
    size = answer.get("file_size")
    if (
        answer.get("transfer_id") != stream.transfer_id
        or answer.get("chunk_size") != chunk_size
        or answer.get("window") != stream.window
        or type(size) is not int
        or size < 0
    ):
        keys = {k: answer.get(k) for k in ("transfer_id", "chunk_size", "window", "file_size")}
        raise ToolError(
            PULL_FILE,
            f"{guest_path!r}: the agent's announcement {keys} does not match transfer "
            f"{stream.transfer_id} of {chunk_size}-byte chunks, window {stream.window}",
            None,
        )
    return size


async def _receive_file(
    link: BinaryTransport,
    stream: TransferStream,
    guest_path: str,
    size: int,
    out: Any,
    progress: ProgressCallback | None,
) -> None:
    """Write the DATA messages of ``stream`` to ``out`` until an END whose sha256 matches.

    The writes run in a :class:`PullWriter` thread while this takes the next message;
    each chunk is acknowledged once written (on the loop, in order).
    """
    received = 0
    acks: set[asyncio.Task[None]] = set()

    def acknowledge(end: int) -> None:
        # Only once the bytes are written: the ACK is what lets the agent send the next
        # message, so a slow host disk slows the guest instead of piling up to a window
        # of unwritten MiB in this process.
        stream.acknowledged()
        ack = asyncio.ensure_future(
            link.send_binary(encode_transfer_frame(FrameKind.ACK, stream.transfer_id, end))
        )
        acks.add(ack)
        ack.add_done_callback(sent)
        if progress is not None:
            progress(end, size)

    def sent(ack: asyncio.Task[None]) -> None:
        acks.discard(ack)
        failure = None if ack.cancelled() else ack.exception()
        if isinstance(failure, Exception):
            stream.fail(failure)

    def refuse(reason: str) -> ToolError:
        return ToolError(PULL_FILE, f"{guest_path!r}: {reason}", None)

    writer = PullWriter(out, stored=acknowledge, failed=stream.fail)
    try:
        while True:
            frame = await _next(
                stream,
                f"data of {guest_path!r} from the agent (transfer "
                f"{stream.transfer_id}, {received} of {size} bytes in)",
            )
            if frame.kind is FrameKind.DATA:
                length = len(frame.payload)
                if frame.offset != received or length == 0 or received + length > size:
                    raise refuse(
                        f"the agent sent {length} bytes at offset {frame.offset}, but "
                        f"{received} of the {size} bytes it announced have arrived (the file "
                        "changed, or the agent lies); nothing kept"
                    )
                received += length
                writer.put(frame.payload, received)
            elif frame.kind is FrameKind.END:
                if frame.offset != size or received != size or len(frame.payload) != DIGEST_SIZE:
                    raise refuse(
                        f"the agent ended the transfer after {received} of {size} bytes (it "
                        f"says {frame.offset}, with a {len(frame.payload)}-byte hash); "
                        "nothing kept"
                    )
                await writer.finish()
                if frame.payload != writer.digest.digest():
                    raise refuse(
                        f"sha256 mismatch (guest {frame.payload.hex()}, host "
                        f"{writer.digest.hexdigest()}); nothing kept"
                    )
                if acks:
                    await asyncio.wait(acks)
                if size == 0 and progress is not None:
                    progress(0, 0)
                return
            else:
                raise refuse(_unexpected(frame))
    finally:
        writer.close()  # before ``out`` closes: the thread may be in a write
        for ack in acks:
            ack.cancel()


async def _push_binary(
    call: CheckedCall,
    link: BinaryTransport,
    source: Path,
    guest_path: str,
    mode: int | None,
    progress: ProgressCallback | None,
    chunk_size: int,
) -> None:
    src = await asyncio.to_thread(source.open, "rb")
    stream = link.open_stream(window=BINARY_PUSH_WINDOW, max_payload=MAX_REASON)
    try:
        size = os.fstat(src.fileno()).st_size
        params: dict[str, Any] = {
            "guest_path": guest_path,
            "transfer_id": stream.transfer_id,
            "file_size": size,
            "chunk_size": chunk_size,
            "window": BINARY_PUSH_WINDOW,
        }
        if mode is not None:
            params["mode"] = mode
        await call(PUSH_FILE, **params)
        sender = _PushSender(link, stream, guest_path, size, progress)
        digest = hashlib.sha256()

        def read(n: int) -> bytes:
            data = src.read(n)
            digest.update(data)
            return data

        while sender.sent < size:
            # Read the next chunk only when the window has room: at most a window of
            # chunks is in memory or on the wire, however big the file.
            await sender.wait_for_room()
            data = await asyncio.to_thread(read, min(chunk_size, size - sender.sent))
            if not data:
                raise ToolError(PUSH_FILE, f"{source} shrank while it was pushed", None)
            await sender.send(data)
        if await asyncio.to_thread(src.read, 1):
            raise ToolError(PUSH_FILE, f"{source} grew while it was pushed", None)
        await link.send_binary(
            encode_transfer_frame(FrameKind.END, stream.transfer_id, size, digest.digest())
        )
        await sender.wait_for_end(digest.digest())
    except BaseException as exc:
        await _cancel(link, stream, f"the host gave up: {type(exc).__name__}: {exc}")
        raise
    finally:
        link.close_stream(stream)
        src.close()


class _PushSender:
    """The host's side of a push: DATA out within the window, the agent's ACKs in."""

    def __init__(
        self,
        link: BinaryTransport,
        stream: TransferStream,
        guest_path: str,
        size: int,
        progress: ProgressCallback | None,
    ) -> None:
        self.link, self.stream, self.guest_path, self.size = link, stream, guest_path, size
        self.progress = progress
        self.sent = 0
        self.acked = 0
        self._in_flight: list[int] = []  # end offsets of DATA messages not acknowledged

    async def send(self, data: bytes) -> None:
        frame = encode_transfer_frame(FrameKind.DATA, self.stream.transfer_id, self.sent, data)
        await self.link.send_binary(frame)
        self.sent += len(data)
        self._in_flight.append(self.sent)

    async def wait_for_room(self) -> None:
        # ACKs that already arrived are taken first, without waiting: the window only
        # blocks when it is really full, so a fast agent keeps the pipe busy.
        while (frame := self.stream.pending()) is not None:
            self._take(frame)
        while len(self._in_flight) >= self.stream.window:
            self._take(await _next(self.stream, self._waiting_for("an acknowledgement")))

    async def wait_for_end(self, digest: bytes) -> None:
        while True:
            frame = await _next(self.stream, self._waiting_for("the file to be in place"))
            if frame.kind is not FrameKind.END:
                self._take(frame)
                continue
            # The agent's END comes after its fsync and rename: it must name every byte
            # sent and the hash the host computed while reading, or the file in place is
            # not the one pushed.
            if frame.offset != self.size or frame.payload != digest or self.acked != self.size:
                raise self._refuse(
                    f"the agent confirmed {frame.offset} bytes with sha256 "
                    f"{frame.payload.hex()} after acknowledging {self.acked}; sent {self.size} "
                    f"bytes with sha256 {digest.hex()}"
                )
            if self.size == 0 and self.progress is not None:
                self.progress(0, 0)
            return

    def _take(self, frame: TransferFrame) -> None:
        if frame.kind is not FrameKind.ACK:
            raise self._refuse(_unexpected(frame))
        # An ACK must land on the end of a message still in flight: one for bytes never
        # sent, or between messages, is an agent that lies about what it has written.
        if not self.acked < frame.offset <= self.sent or frame.offset not in self._in_flight:
            raise self._refuse(
                f"the agent acknowledged offset {frame.offset} ({self.acked} acknowledged, "
                f"{self.sent} sent)"
            )
        self.acked = frame.offset
        self._in_flight = [end for end in self._in_flight if end > frame.offset]
        if self.progress is not None:
            self.progress(self.acked, self.size)

    def _waiting_for(self, what: str) -> str:
        return (
            f"{what} from the agent for {self.guest_path!r} (transfer {self.stream.transfer_id}, "
            f"{self.acked} of {self.size} bytes acknowledged)"
        )

    def _refuse(self, reason: str) -> ToolError:
        return ToolError(PUSH_FILE, f"{self.guest_path!r}: {reason}", None)


async def _next(stream: TransferStream, what: str) -> TransferFrame:
    return await stream.next(BINARY_FRAME_TIMEOUT, what)


def _unexpected(frame: TransferFrame) -> str:
    if frame.kind is FrameKind.CANCEL:
        return f"the agent cancelled the transfer: {frame.payload.decode('utf-8', 'replace')}"
    return f"unexpected {frame.kind.name} message from the agent"


async def _cancel(link: BinaryTransport, stream: TransferStream, reason: str) -> None:
    """Tell the agent to stop (best effort: the connection may be gone)."""
    with contextlib.suppress(AgentDisconnected, OSError):
        await asyncio.shield(link.send_binary(cancel_frame(stream.transfer_id, reason)))
