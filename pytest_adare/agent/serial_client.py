"""The host's client for the agent over the DV serial link (DESIGN §4), on asyncio.

QEMU exposes the agent's serial port as a Unix stream socket; this client speaks the
link layer of :mod:`adare_guest.serial.link` over it and offers the same interface as
the WebSocket :class:`~pytest_adare.agent.websocket_client.AgentClient`::

    client = await SerialAgentClient.connect("/run/vm/agent-serial.sock")
    result = await client.call("get_timestamp", {})
    health = await client.ping()            # works while the guest network is down
    await client.close()

    health = await SerialAgentClient.ping(path, timeout=5.0)   # one-off, no session

One exchange is in flight at a time (an asyncio lock). Each waits a bounded time for
its answer and is retransmitted a few times (the guest answers a retransmission
without acting twice); when all attempts fail the link counts as dropped and every
pending call fails with :class:`AgentDisconnected`. A poller fetches the guest's
results and events: at once while data flows, every few milliseconds while calls are
pending, backing off to :data:`IDLE_POLL_MAX` when idle.

The guest's messages are reassembled from fragments up to ``max_message_bytes``
(default :data:`~pytest_adare.agent.call_router.DEFAULT_MAX_MESSAGE_BYTES`): a
fragment that announces a bigger message is refused before any of it is kept, and a
fragment out of order or with a size that changes mid-message ends the link. Any
failure of the poller fails every pending call at once and closes the client.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any, overload

from adare_guest.serial.link import (
    SEND_CHUNK,
    Answer,
    ErrorCode,
    Fragment,
    HostLink,
    LinkError,
    Op,
    PollFlag,
    Reassembler,
    RemoteError,
    Retry,
    fragments,
)
from pytest_adare.agent.call_router import CLIENT_INFO as WEBSOCKET_CLIENT_INFO
from pytest_adare.agent.call_router import DEFAULT_MAX_MESSAGE_BYTES, CallRouter
from pytest_adare.errors import AgentDisconnected, ProtocolViolation

EXCHANGE_TIMEOUT = 4.0
"""Seconds to wait for the answer to one request before sending it again."""
ATTEMPTS = 5
"""Sends of one request before the link counts as dropped."""
BUSY_POLL_MAX = 0.05
"""Longest pause between polls while calls are pending."""
IDLE_POLL_MAX = 1.0
"""Longest pause between polls when nothing is pending (events still arrive)."""
CLIENT_INFO = {**WEBSOCKET_CLIENT_INFO, "transport": "serial"}


class SerialLinkChannel:
    """Request/answer exchanges over a byte stream: the host's I/O shell around HostLink."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        peer: str,
        *,
        exchange_timeout: float = EXCHANGE_TIMEOUT,
        attempts: int = ATTEMPTS,
    ) -> None:
        self.peer = peer
        self.exchange_timeout = exchange_timeout
        self.attempts = attempts
        self._reader = reader
        self._writer = writer
        self._link = HostLink()
        self._lock = asyncio.Lock()
        self.broken = False
        """The socket closed or failed: no exchange can succeed any more."""
        self.retries = 0
        """Retransmissions so far (damaged or lost frames)."""

    @classmethod
    async def open(
        cls, path: str | os.PathLike[str], *, timeout: float = 10.0, **kwargs: Any
    ) -> SerialLinkChannel:
        """Connect to the Unix socket at ``path`` (retrying while it does not exist yet).

        :raise AgentDisconnected: no connection within ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        while True:
            try:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_unix_connection(path), max(0.1, deadline - time.monotonic())
                )
                return cls(reader, writer, f"serial socket {path}", **kwargs)
            except (OSError, asyncio.TimeoutError) as exc:
                if time.monotonic() >= deadline:
                    raise AgentDisconnected(
                        f"cannot connect to the agent's serial socket {path} within "
                        f"{timeout:.1f} s: {type(exc).__name__}: {exc}"
                    ) from exc
            await asyncio.sleep(0.1)

    async def exchange(self, op: Op, body: bytes = b"") -> bytes:
        """Send one request and return the body of its answer.

        :raise RemoteError: the guest answered ERROR.
        :raise AgentDisconnected: no valid answer after all attempts, or the socket closed.
        """
        async with self._lock:
            if self.broken:
                raise AgentDisconnected(f"{self.peer} is closed")
            wire = self._link.request(op, body)
            reasons: list[str] = []
            try:
                for attempt in range(self.attempts):
                    if attempt:
                        self.retries += 1
                        await self._drain_input()
                        wire = self._link.retransmit()
                    await self._write(wire)
                    outcome = await self._await_answer()
                    if isinstance(outcome, Answer):
                        return outcome.body
                    reasons.append(outcome.reason)
            finally:
                self._link.finish()
        raise AgentDisconnected(
            f"no valid answer to {op.name} from the agent on {self.peer} after "
            f"{self.attempts} attempts of {self.exchange_timeout:.1f} s ({'; '.join(reasons)})"
        )

    async def close(self) -> None:
        """Close the socket."""
        self._writer.close()
        with contextlib.suppress(OSError, asyncio.TimeoutError):
            await asyncio.wait_for(self._writer.wait_closed(), 2.0)

    async def _write(self, wire: bytes) -> None:
        try:
            self._writer.write(wire)
            await asyncio.wait_for(self._writer.drain(), self.exchange_timeout)
        except (OSError, asyncio.TimeoutError) as exc:
            self.broken = True
            raise AgentDisconnected(f"cannot write to {self.peer}: {exc!r}") from exc

    async def _await_answer(self) -> Answer | Retry:
        deadline = time.monotonic() + self.exchange_timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return self._link.receive_timeout()
            try:
                data = await asyncio.wait_for(self._reader.read(65536), remaining)
            except asyncio.TimeoutError:
                continue
            except OSError as exc:
                self.broken = True
                raise AgentDisconnected(f"reading {self.peer} failed: {exc!r}") from exc
            if not data:
                self.broken = True
                raise AgentDisconnected(f"{self.peer} was closed (QEMU gone?)")
            outcome = self._link.receive_data(data)
            if outcome is not None:
                return outcome

    async def _drain_input(self) -> None:
        """Discard what the guest still sends of a damaged exchange (bounded: 0.5 s)."""
        deadline = time.monotonic() + 0.5
        while (remaining := deadline - time.monotonic()) > 0:
            try:
                data = await asyncio.wait_for(self._reader.read(65536), min(0.05, remaining))
            except asyncio.TimeoutError:
                return
            if not data:
                return


class _PingMethod:
    """``await client.ping()`` on a client; ``await SerialAgentClient.ping(path)`` one-off."""

    @overload
    def __get__(
        self, obj: None, owner: type[SerialAgentClient]
    ) -> Callable[..., Awaitable[dict[str, Any]]]: ...

    @overload
    def __get__(
        self, obj: SerialAgentClient, owner: type[SerialAgentClient]
    ) -> Callable[[], Awaitable[dict[str, Any]]]: ...

    def __get__(
        self, obj: SerialAgentClient | None, owner: type[SerialAgentClient]
    ) -> Callable[..., Awaitable[dict[str, Any]]]:
        if obj is None:
            return owner.ping_path
        return obj.ping_connected


class SerialAgentClient(CallRouter):
    """A live serial link to the agent; create it with :meth:`connect`."""

    ping = _PingMethod()

    def __init__(
        self, channel: SerialLinkChannel, *, max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    ):
        super().__init__(
            channel.peer, disconnect_type=AgentDisconnected, max_message_bytes=max_message_bytes
        )
        self._channel = channel
        self._inbound = Reassembler(max_message_bytes)
        self._inbound_binary = False
        self._wake = asyncio.Event()
        self.link_info: dict[str, Any] = {}
        self._poller: asyncio.Task[None] | None = None

    # -- connecting -------------------------------------------------------------------

    @classmethod
    async def connect(
        cls,
        path: str | os.PathLike[str],
        *,
        timeout: float = 30.0,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        **channel_options: Any,
    ) -> SerialAgentClient:
        """Open the socket, start a fresh session in the agent and exchange ``connect``.

        ``max_message_bytes`` bounds one (reassembled) message from the agent.

        :raise AgentDisconnected: the socket or the agent did not answer in time.
        """
        channel = await SerialLinkChannel.open(path, timeout=timeout, **channel_options)
        return await cls.attach(channel, timeout=timeout, max_message_bytes=max_message_bytes)

    @classmethod
    async def attach(
        cls,
        channel: SerialLinkChannel,
        *,
        timeout: float = 30.0,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    ) -> SerialAgentClient:
        """Start a session over an already open channel (closed again when this fails)."""
        client = cls(channel, max_message_bytes=max_message_bytes)
        try:
            await client._start(timeout)
        except BaseException:
            await client.close()
            raise
        return client

    async def _start(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout

        async def open_session() -> bytes:
            while True:  # the agent may still be starting: ask again until the deadline
                try:
                    return await self._channel.exchange(Op.OPEN)
                except AgentDisconnected:
                    if self._channel.broken:
                        raise

        try:
            body = await asyncio.wait_for(open_session(), timeout)
        except asyncio.TimeoutError:
            raise AgentDisconnected(
                f"the agent did not answer OPEN over {self.peer} within {timeout:.1f} s"
            ) from None
        self.link_info = _json_object(body, "OPEN answer")
        self._poller = asyncio.create_task(self._poll_loop(), name=f"serial-poll {self.peer}")
        try:
            await self._exchange_connect(CLIENT_INFO, max(1.0, deadline - time.monotonic()))
        except asyncio.TimeoutError as exc:
            raise AgentDisconnected(str(exc)) from None

    @classmethod
    async def ping_path(cls, path: str | os.PathLike[str], timeout: float = 5.0) -> dict[str, Any]:
        """Connect to ``path``, ask the agent's health report, close; no session is touched.

        :raise AgentDisconnected: no answer within about ``timeout`` seconds.
        """
        attempts = 2
        channel = await SerialLinkChannel.open(
            path, timeout=timeout, exchange_timeout=timeout / attempts, attempts=attempts
        )
        try:
            return _json_object(await channel.exchange(Op.PING), "health report")
        finally:
            await channel.close()

    async def ping_connected(self) -> dict[str, Any]:
        """The agent's health report (version, listen address, listening, uptime, last error)."""
        self._check_open("send ping")
        return _json_object(await self._channel.exchange(Op.PING), "health report")

    async def close(self) -> None:
        """Close the link; calls still pending fail with :class:`AgentDisconnected`."""
        was_open = self._failure is None
        self._fail_all(AgentDisconnected(f"serial link {self.peer} closed by the host"))
        if self._poller is not None:
            self._poller.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(self._poller, 10.0)
        if was_open and self._poller is not None:
            # Like a closed WebSocket: the agent cancels our calls and kills their processes.
            with contextlib.suppress(AgentDisconnected, RemoteError):
                await self._channel.exchange(Op.CLOSE)
        await self._channel.close()
        await self._stop_events()

    # -- sending and polling ------------------------------------------------------------

    async def _transmit(self, text: str) -> None:
        await self._send_fragments(Op.SEND, text.encode())

    async def _transmit_binary(self, data: bytes) -> None:
        await self._send_fragments(Op.SEND_BINARY, data)

    async def _send_fragments(self, op: Op, data: bytes) -> None:
        try:
            for fragment in fragments(data, SEND_CHUNK):
                await self._channel.exchange(op, fragment.encode())
        except RemoteError as exc:
            with contextlib.suppress(RemoteError):
                await self._channel.exchange(Op.ABORT)
            raise ProtocolViolation(f"the agent refused a message over {self.peer}: {exc}") from exc
        except AgentDisconnected as exc:
            self._fail_all(exc)
            raise
        self._wake.set()  # an answer is coming: poll at once

    async def _poll_loop(self) -> None:
        # Whatever ends this loop, pending calls fail at once and the client is closed.
        failure: Exception = AgentDisconnected(f"polling the agent on {self.peer} stopped")
        try:
            await self._poll_until_failure()
        except (AgentDisconnected, ProtocolViolation) as exc:
            failure = exc
        except RemoteError as exc:
            failure = ProtocolViolation(str(exc))
        except Exception as exc:  # a bug or a hostile message we did not foresee
            failure = ProtocolViolation(
                f"reading from the agent on {self.peer} failed: {type(exc).__name__}: {exc}"
            )
            failure.__cause__ = exc
        finally:
            self._fail_all(failure)

    async def _poll_until_failure(self) -> None:
        pause = 0.0
        while self._failure is None:
            got_data = await self._poll_once()
            if got_data:
                pause = 0.0
                continue
            ceiling = BUSY_POLL_MAX if self._pending else IDLE_POLL_MAX
            pause = min(ceiling, max(0.002, pause * 2))
            self._wake.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), pause)
            if self._wake.is_set():
                pause = 0.0

    async def _poll_once(self) -> bool:
        body = await self._channel.exchange(Op.POLL)
        if not body or not body[0] & PollFlag.DATA:
            return False  # the link's device thread answers polls: no sign of the agent's loop
        self.note_heard()
        binary = bool(body[0] & PollFlag.BINARY)
        if self._inbound.in_progress and binary != self._inbound_binary:
            raise ProtocolViolation(
                f"the agent on {self.peer} changed a message's kind (binary or text) mid-way"
            )
        self._inbound_binary = binary
        try:
            message = self._inbound.add(Fragment.parse(body[1:]))
        except LinkError as exc:
            if exc.code == ErrorCode.TOO_LARGE:
                raise ProtocolViolation(
                    f"the agent on {self.peer} announced a message above max_message_bytes="
                    f"{self.max_message_bytes} (the host's bound on one message from the "
                    f"guest): {exc}"
                ) from exc
            raise ProtocolViolation(f"bad fragment from the agent on {self.peer}: {exc}") from exc
        if message is not None:
            if binary:
                self._receive_binary(message)
            else:
                self._receive(message)
        return True


def _json_object(body: bytes, what: str) -> dict[str, Any]:
    try:
        value = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise ProtocolViolation(f"the agent's {what} is not JSON: {body[:200]!r}") from exc
    if not isinstance(value, dict):
        raise ProtocolViolation(f"the agent's {what} is not a JSON object: {body[:200]!r}")
    return value
