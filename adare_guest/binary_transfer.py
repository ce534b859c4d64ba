"""Binary file transfer: file bytes in binary messages, control in JSON (docs/agent.md).

A transfer is announced by a JSON tool call (``pull_file`` or ``push_file``) that names a
``transfer_id`` chosen by the host; its bytes then travel as binary messages (binary
WebSocket frames, or binary messages on the serial link), each a 20-byte header and a
payload. All integers are big-endian::

    magic u8 (0xB1) | kind u8 | flags u16 (0) | transfer_id u32 | offset u64 | length u32
    | payload (length bytes)

``0xB1`` is never the first byte of UTF-8 text, so a binary message cannot be taken for
a JSON one. Kinds:

- ``DATA``: ``length`` file bytes that belong at ``offset``; offsets are contiguous, from 0.
- ``ACK``: the receiver has stored everything before ``offset`` (no payload). The sender
  keeps at most ``window`` DATA messages not yet acknowledged.
- ``END``: the sender has sent ``offset`` bytes, the whole file; the payload is the sha256
  digest (32 bytes) of all of them, computed while streaming. After a push the guest
  answers END with END (the digest of what it stored) once the file is in place.
- ``CANCEL``: the transfer is abandoned; the payload is the reason (UTF-8).

Kinds 16 and up are other streams that share this header (a terminal's bytes,
:mod:`adare_guest.terminal`); :meth:`Transfers.attach` routes them to their handler, so a
host that never opens such a stream never sees them.

:class:`Transfers` is one session's guest side: it streams pulls (reading ahead one
chunk, hashing as it reads) and stores pushes (checking every offset and length against
the size announced, hashing as it writes). Either side's peer is untrusted.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import hashlib
import logging
import struct
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from adare_guest.worker_pool import shared_pool

log = logging.getLogger("adare_guest.transfer")

MAGIC = 0xB1
HEADER = struct.Struct(">BBHIQI")
HEADER_SIZE = HEADER.size  # 20
DIGEST_SIZE = 32
DEFAULT_CHUNK = 1024 * 1024
"""Payload bytes per DATA message unless the host asks otherwise."""
MAX_CHUNK = 8 * 1024 * 1024
DEFAULT_WINDOW = 4
"""DATA messages in flight (sent, not yet acknowledged) unless the host asks otherwise."""
# Why a window at all: a send that returned only says the transport took the bytes, not
# that the host stored them; without ACKs a host that writes slowly would have a whole
# file queued in buffers between the two. With several chunks in flight the link stays
# busy while one ACK makes its round trip, and MAX_WINDOW * MAX_CHUNK (128 MiB) bounds
# what one transfer can have unacknowledged.
MAX_WINDOW = 16
MAX_TRANSFERS = 8
"""Transfers one session may have open at once (memory: about two chunks each)."""
ACK_TIMEOUT = 60.0
"""Seconds a sender waits for an acknowledgement that opens the window again."""
MAX_REASON = 1000
"""Bytes of a CANCEL reason that are kept."""


class FrameKind(enum.IntEnum):
    """What a binary transfer message carries."""

    DATA = 1
    ACK = 2
    END = 3
    CANCEL = 4
    TERMINAL_DATA = 16
    TERMINAL_ACK = 17
    TERMINAL_RESIZE = 18
    TERMINAL_SIGNAL = 19
    TERMINAL_CLOSE = 20
    TERMINAL_EXIT = 21


TERMINAL_KINDS = frozenset(kind for kind in FrameKind if kind >= FrameKind.TERMINAL_DATA)
"""The kinds of a terminal stream (:mod:`adare_guest.terminal`), not of a file transfer."""


class StreamHandler(Protocol):
    """Another kind of binary stream on a session (:meth:`Transfers.attach`)."""

    async def receive(self, frame: TransferFrame) -> None:
        """Act on one message of the handler's kinds."""

    async def close(self) -> None:
        """The session ends: stop every stream."""


class TransferFrameError(ValueError):
    """A binary message that is not a well-formed transfer message."""


@dataclass(frozen=True)
class TransferFrame:
    """One decoded binary transfer message."""

    kind: FrameKind
    transfer_id: int
    offset: int
    payload: bytes


def encode_transfer_frame(
    kind: FrameKind, transfer_id: int, offset: int, payload: bytes = b""
) -> bytes:
    """The wire bytes of one message.

    >>> encode_transfer_frame(FrameKind.ACK, 7, 1024).hex(" ", 4)
    'b1020000 00000007 00000000 00000400 00000000'
    """
    return HEADER.pack(MAGIC, kind, 0, transfer_id, offset, len(payload)) + payload


def parse_transfer_frame(data: bytes) -> TransferFrame:
    """Decode one binary message, checking magic, kind, flags and length.

    :raise TransferFrameError: anything is wrong (the message says what).
    """
    if len(data) < HEADER_SIZE:
        raise TransferFrameError(f"binary message of {len(data)} bytes has no transfer header")
    magic, kind, flags, transfer_id, offset, length = HEADER.unpack_from(data)
    if magic != MAGIC:
        raise TransferFrameError(f"binary message starts with 0x{magic:02X}, not 0x{MAGIC:02X}")
    if flags:
        raise TransferFrameError(f"transfer message flags must be 0, got 0x{flags:04X}")
    if length != len(data) - HEADER_SIZE:
        raise TransferFrameError(
            f"transfer message says {length} payload bytes, carries {len(data) - HEADER_SIZE}"
        )
    try:
        frame_kind = FrameKind(kind)
    except ValueError:
        raise TransferFrameError(f"unknown transfer message kind {kind}") from None
    return TransferFrame(frame_kind, transfer_id, offset, bytes(data[HEADER_SIZE:]))


def is_transfer_frame(data: bytes) -> bool:
    """Whether a binary message is meant as a transfer message (its first byte)."""
    return data[:1] == bytes((MAGIC,))


def cancel_frame(transfer_id: int, reason: str) -> bytes:
    """A CANCEL message with ``reason`` (shortened to :data:`MAX_REASON` bytes)."""
    text = reason.encode("utf-8", "replace")[:MAX_REASON]
    return encode_transfer_frame(FrameKind.CANCEL, transfer_id, 0, text)


def check_transfer_params(transfer_id: int, chunk_size: int, window: int) -> str | None:
    """Why these parameters of a ``pull_file``/``push_file`` call are refused, else None."""
    if not 1 <= transfer_id <= 0xFFFFFFFF:
        return f"transfer_id must be 1..{0xFFFFFFFF}, got {transfer_id}"
    if not 1 <= chunk_size <= MAX_CHUNK:
        return f"chunk_size must be 1..{MAX_CHUNK}, got {chunk_size}"
    if not 1 <= window <= MAX_WINDOW:
        return f"window must be 1..{MAX_WINDOW}, got {window}"
    return None


class TransferRefused(Exception):
    """A transfer cannot start (id in use, too many open); the message says why."""


# --------------------------------------------------------------------------- guest side


SendBinary = Callable[[bytes], Awaitable[None]]
ReadFunc = Callable[[int], bytes]
"""Blocking: the next ``n`` bytes of the source (fewer only at its end)."""


@dataclass
class _Outgoing:
    """A pull being streamed to the host."""

    transfer_id: int
    size: int
    chunk: int
    window: int
    read: ReadFunc
    close: Callable[[], None]
    acked: int = 0
    sent_ends: list[int] = field(default_factory=list)
    credit: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None


@dataclass
class _Incoming:
    """A push being stored; ``write``/``finish``/``abandon`` are blocking (worker thread)."""

    transfer_id: int
    size: int
    chunk: int
    window: int
    write: Callable[[bytes], None]
    finish: Callable[[], None]
    abandon: Callable[[], None]
    received: int = 0
    digest: Any = field(default_factory=hashlib.sha256)


class Transfers:
    """One session's binary transfers; ``send`` sends one binary message to the host."""

    def __init__(self, send: SendBinary) -> None:
        self._send = send
        self._outgoing: dict[int, _Outgoing] = {}
        self._incoming: dict[int, _Incoming] = {}
        self._handlers: dict[FrameKind, StreamHandler] = {}
        self.closed = False

    @property
    def send(self) -> SendBinary:
        """Sends one binary message to the host (for other stream kinds' handlers)."""
        return self._send

    def handler(self, kind: FrameKind) -> StreamHandler | None:
        """The handler attached for ``kind``, if any."""
        return self._handlers.get(kind)

    def attach(self, kinds: frozenset[FrameKind], handler: StreamHandler) -> None:
        """Route messages of ``kinds`` to ``handler``; it is closed with the session."""
        for kind in kinds:
            self._handlers[kind] = handler

    def _claim(self, transfer_id: int) -> None:
        if self.closed:
            raise TransferRefused("the session is closing")
        if transfer_id in self._outgoing or transfer_id in self._incoming:
            raise TransferRefused(f"transfer {transfer_id} is already in progress")
        if len(self._outgoing) + len(self._incoming) >= MAX_TRANSFERS:
            raise TransferRefused(f"{MAX_TRANSFERS} transfers are already in progress")

    def start_pull(
        self,
        transfer_id: int,
        size: int,
        *,
        chunk: int,
        window: int,
        read: ReadFunc,
        close: Callable[[], None],
    ) -> None:
        """Stream ``size`` bytes from ``read`` as DATA messages, then END (or CANCEL).

        ``close`` runs when the stream ends, however it ends.

        :raise TransferRefused: the id is in use or too many transfers are open.
        """
        self._claim(transfer_id)
        out = _Outgoing(transfer_id, size, chunk, window, read, close)
        self._outgoing[transfer_id] = out
        out.task = asyncio.get_running_loop().create_task(self._stream(out))

    def start_push(
        self,
        transfer_id: int,
        size: int,
        *,
        chunk: int,
        window: int,
        write: Callable[[bytes], None],
        finish: Callable[[], None],
        abandon: Callable[[], None],
    ) -> None:
        """Accept ``size`` bytes for ``write``; END runs ``finish`` (file in place).

        :raise TransferRefused: the id is in use or too many transfers are open.
        """
        self._claim(transfer_id)
        self._incoming[transfer_id] = _Incoming(
            transfer_id, size, chunk, window, write, finish, abandon
        )

    async def receive(self, data: bytes) -> None:
        """Act on one binary message from the host.

        :raise TransferFrameError: it is not a transfer message at all.
        """
        frame = parse_transfer_frame(data)
        if frame.kind in TERMINAL_KINDS:
            handler = self._handlers.get(frame.kind)
            if handler is not None:
                await handler.receive(frame)
            return
        if frame.transfer_id in self._outgoing:
            self._on_pull_frame(self._outgoing[frame.transfer_id], frame)
        elif frame.transfer_id in self._incoming:
            await self._on_push_frame(self._incoming[frame.transfer_id], frame)
        elif frame.kind is not FrameKind.CANCEL:
            await self._send(cancel_frame(frame.transfer_id, "no such transfer"))

    async def close(self) -> None:
        """Stop every transfer (pulls cancelled, half-pushed files removed)."""
        self.closed = True
        for handler in set(self._handlers.values()):
            await handler.close()
        tasks = [out.task for out in self._outgoing.values() if out.task is not None]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=10)
        incoming, self._incoming = list(self._incoming.values()), {}
        for push in incoming:
            await _in_thread(push.abandon)

    # -- pulls ----------------------------------------------------------------------

    def _on_pull_frame(self, out: _Outgoing, frame: TransferFrame) -> None:
        if frame.kind is FrameKind.ACK:
            if frame.offset > out.acked:
                out.acked = min(frame.offset, out.size)
                out.credit.set()
        elif frame.kind is FrameKind.CANCEL:
            log.info("transfer %d cancelled by the host: %s", out.transfer_id, _text(frame))
            if out.task is not None:
                out.task.cancel()

    async def _stream(self, out: _Outgoing) -> None:
        digest = hashlib.sha256()

        def read_and_hash(n: int) -> bytes:
            data = out.read(n)
            digest.update(data)
            return data

        offset = 0
        ahead: asyncio.Future[bytes] | None = None
        try:
            if out.size:
                ahead = _read_ahead(read_and_hash, min(out.chunk, out.size))
            while ahead is not None:
                data = await ahead
                ahead = None
                if len(data) != min(out.chunk, out.size - offset):
                    raise OSError(f"the file shrank to {offset + len(data)} bytes while pulled")
                end = offset + len(data)
                if end < out.size:  # read the next chunk while this one is sent
                    ahead = _read_ahead(read_and_hash, min(out.chunk, out.size - end))
                # The read-ahead above runs before the wait for credit, so a full window
                # costs no disk latency once it opens; memory stays at two chunks (this
                # one and the next), whatever the window.
                await self._wait_for_credit(out)
                frame = encode_transfer_frame(FrameKind.DATA, out.transfer_id, offset, data)
                await self._send(frame)
                out.sent_ends.append(end)
                offset = end
            await self._send(
                encode_transfer_frame(FrameKind.END, out.transfer_id, out.size, digest.digest())
            )
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            with contextlib.suppress(Exception):
                await self._send(cancel_frame(out.transfer_id, f"{type(exc).__name__}: {exc}"))
        finally:
            self._outgoing.pop(out.transfer_id, None)
            if ahead is not None:  # a read still runs on the descriptor: let it end first
                await asyncio.wait([ahead], timeout=ACK_TIMEOUT)
            with contextlib.suppress(OSError):
                out.close()

    async def _wait_for_credit(self, out: _Outgoing) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + ACK_TIMEOUT
        # In flight = sent chunks whose end the host has not acknowledged. Counting chunks,
        # not bytes, keeps the rule the host's: its ACK offsets may cover several chunks
        # at once (it acknowledges what it stored), and any ACK beyond one end frees it.
        # One deadline for the whole wait, not per wake-up: ACKs that never advance
        # (a host replaying an old offset) must not keep the pull alive for ever.
        while sum(1 for end in out.sent_ends if end > out.acked) >= out.window:
            out.credit.clear()
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise TimeoutError(f"the host acknowledged nothing for {ACK_TIMEOUT:g} s")
            # asyncio.TimeoutError: not TimeoutError before Python 3.11
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(out.credit.wait(), remaining)
        out.sent_ends = [end for end in out.sent_ends if end > out.acked]

    # -- pushes ---------------------------------------------------------------------

    async def _on_push_frame(self, push: _Incoming, frame: TransferFrame) -> None:
        try:
            if frame.kind is FrameKind.DATA:
                await self._store(push, frame)
            elif frame.kind is FrameKind.END:
                await self._end_push(push, frame)
            elif frame.kind is FrameKind.CANCEL:
                log.info("push %d cancelled by the host: %s", push.transfer_id, _text(frame))
                await self._drop_push(push, None)
            else:
                raise ValueError(f"a {frame.kind.name} message is not for the receiving side")
        except (OSError, ValueError) as exc:
            await self._drop_push(push, f"{type(exc).__name__}: {exc}")

    async def _store(self, push: _Incoming, frame: TransferFrame) -> None:
        length = len(frame.payload)
        if frame.offset != push.received:
            raise ValueError(f"data at offset {frame.offset}, expected {push.received}")
        if not 1 <= length <= push.chunk:
            raise ValueError(f"data message of {length} bytes (chunk size {push.chunk})")
        if push.received + length > push.size:
            raise ValueError(f"more than the {push.size} bytes announced")

        def write() -> None:
            push.write(frame.payload)
            push.digest.update(frame.payload)

        await _in_thread(write)
        push.received += length
        await self._send(encode_transfer_frame(FrameKind.ACK, push.transfer_id, push.received))

    async def _end_push(self, push: _Incoming, frame: TransferFrame) -> None:
        if frame.offset != push.size or push.received != push.size:
            raise ValueError(
                f"end after {push.received} of {push.size} bytes (sender says {frame.offset})"
            )
        actual = push.digest.digest()
        if frame.payload != actual:
            raise ValueError(
                f"sha256 mismatch: sent {frame.payload.hex()}, stored {actual.hex()}; "
                "nothing written"
            )
        await _in_thread(push.finish)
        self._incoming.pop(push.transfer_id, None)
        await self._send(encode_transfer_frame(FrameKind.END, push.transfer_id, push.size, actual))

    async def _drop_push(self, push: _Incoming, reason: str | None) -> None:
        self._incoming.pop(push.transfer_id, None)
        await _in_thread(push.abandon)
        if reason is not None:
            await self._send(cancel_frame(push.transfer_id, reason))


def _read_ahead(read: ReadFunc, n: int) -> asyncio.Future[bytes]:
    return asyncio.ensure_future(shared_pool().run(read, n))


async def _in_thread(func: Callable[[], None]) -> None:
    await shared_pool().run(func)


def _text(frame: TransferFrame) -> str:
    return frame.payload.decode("utf-8", "replace")
