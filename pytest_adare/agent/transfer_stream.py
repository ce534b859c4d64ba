"""The host's end of one binary transfer: frames the agent sent, bounded, in order.

A client (:class:`~pytest_adare.agent.call_router.CallRouter`) hands every binary
transfer message of the agent to the :class:`TransferStream` its transfer id names;
:mod:`pytest_adare.agent.transfer` takes them out with :meth:`TransferStream.next`.
The agent is untrusted, so the stream bounds what it holds: a DATA message bigger than
the chunk size, more DATA messages than the window allows before the host acknowledged
them, or more queued messages than the window can explain fail the transfer (not the
connection) and nothing more of it is kept.

The wire format is :mod:`adare_guest.binary_transfer` (docs/agent.md "Binary transfer").
"""

from __future__ import annotations

import asyncio
import secrets
from collections import OrderedDict, deque

from adare_guest.binary_transfer import FrameKind, TransferFrame
from pytest_adare.errors import ProtocolViolation, VMTimeout

RECENTLY_CLOSED = 64
"""Closed transfer ids whose late messages are still dropped quietly (not a violation)."""


class TransferStream:
    """Messages of one transfer, from the agent to the host, as they arrived."""

    def __init__(self, transfer_id: int, *, window: int, max_payload: int, peer: str) -> None:
        self.transfer_id = transfer_id
        self.window = window
        self.max_payload = max_payload
        self.peer = peer
        self.failure: Exception | None = None
        self._frames: deque[TransferFrame] = deque()
        self._arrived = asyncio.Event()
        self._unacknowledged = 0  # DATA messages received that the host has not acknowledged

    def feed(self, frame: TransferFrame) -> None:
        """Take one message from the agent (on the loop; never raises)."""
        if self.failure is not None:
            return
        if frame.kind is FrameKind.DATA:
            self._unacknowledged += 1
            if len(frame.payload) > self.max_payload:
                self.fail(
                    f"a data message of {len(frame.payload)} bytes (chunk size {self.max_payload})"
                )
                return
            if self._unacknowledged > self.window:
                self.fail(
                    f"{self._unacknowledged} data messages unacknowledged (window {self.window})"
                )
                return
        elif len(frame.payload) > self.max_payload:
            self.fail(f"a {frame.kind.name} message of {len(frame.payload)} bytes")
            return
        if len(self._frames) > 2 * self.window + 2:
            self.fail(f"{len(self._frames)} messages queued (window {self.window})")
            return
        self._frames.append(frame)
        self._arrived.set()

    def acknowledged(self) -> None:
        """The host sent an ACK for one more DATA message: the window opens by one."""
        self._unacknowledged = max(0, self._unacknowledged - 1)

    def fail(self, reason: str | Exception) -> None:
        """End the transfer with ``reason``; queued messages are dropped."""
        if self.failure is None:
            self.failure = (
                reason
                if isinstance(reason, Exception)
                else ProtocolViolation(
                    f"the agent at {self.peer} broke transfer {self.transfer_id}: {reason}"
                )
            )
        self._frames.clear()
        self._arrived.set()

    def pending(self) -> TransferFrame | None:
        """The next message if one is queued (no waiting).

        :raise Exception: the transfer failed (:attr:`failure`).
        """
        if self._frames:
            return self._frames.popleft()
        if self.failure is not None:
            raise self.failure
        return None

    async def next(self, timeout: float, what: str) -> TransferFrame:
        """The next message, waiting up to ``timeout`` seconds.

        :raise VMTimeout: nothing arrived in time (``what`` says what was waited for).
        :raise Exception: the transfer or the connection failed (:attr:`failure`).
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while (frame := self.pending()) is None:
            self._arrived.clear()
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise VMTimeout(what, timeout)
            try:
                await asyncio.wait_for(self._arrived.wait(), remaining)
            except asyncio.TimeoutError:
                continue
        return frame


class TransferStreams:
    """A client's open transfers by id, and the ids closed lately."""

    def __init__(self, peer: str) -> None:
        self.peer = peer
        self._open: dict[int, TransferStream] = {}
        self._closed: OrderedDict[int, None] = OrderedDict()

    def open(self, *, window: int, max_payload: int) -> TransferStream:
        """A stream under a fresh random id (1..2**32-1) that no open transfer uses."""
        while True:
            transfer_id = secrets.randbelow(0xFFFFFFFF) + 1
            if transfer_id not in self._open and transfer_id not in self._closed:
                break
        stream = TransferStream(transfer_id, window=window, max_payload=max_payload, peer=self.peer)
        self._open[transfer_id] = stream
        return stream

    def close(self, stream: TransferStream) -> None:
        """Forget ``stream``; late messages for its id are dropped for a while."""
        if self._open.pop(stream.transfer_id, None) is not None:
            self._closed[stream.transfer_id] = None
            while len(self._closed) > RECENTLY_CLOSED:
                self._closed.popitem(last=False)

    def deliver(self, frame: TransferFrame) -> None:
        """Hand ``frame`` to its stream.

        :raise ProtocolViolation: no transfer with that id was opened by the host.
        """
        stream = self._open.get(frame.transfer_id)
        if stream is not None:
            stream.feed(frame)
        elif frame.transfer_id not in self._closed:
            raise ProtocolViolation(
                f"the agent at {self.peer} sent a {frame.kind.name} message for transfer "
                f"{frame.transfer_id}, which the host never opened"
            )

    def fail_all(self, failure: Exception) -> None:
        """The connection is gone: every open transfer fails with ``failure``."""
        for stream in self._open.values():
            stream.fail(failure)
