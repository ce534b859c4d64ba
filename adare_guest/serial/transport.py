"""The agent's serial transport: a blocking device loop in a thread feeding the link layer.

One thread owns the device (pyserial, raw 8N1, or a plain character device such as a
virtio-serial port) and the :class:`~adare_guest.serial.link.GuestLink` state machine,
so fragments, polls and pings are answered without a trip through the event loop
(each such trip costs milliseconds in a TCG guest). Complete messages and session
changes go to the asyncio loop, where the server session handles them.

Every wait is bounded: reads time out, a frame cut off for ``frame_timeout`` seconds
is answered with PARTIAL_FRAME, writes time out, and a hand-off to the loop that takes
longer than ``handoff_timeout`` is given up. A device that fails is reopened after
``reopen_delay`` seconds, backing off while it keeps failing.

    transport = SerialTransport(server, "/dev/ttyS1")
    await transport.serve()          # until cancelled
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import select
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import serial

from adare_guest.serial.link import (
    BinaryReceived,
    GuestLink,
    LinkError,
    LinkEvent,
    MessageReceived,
    SessionEnded,
    SessionRequested,
)
from adare_guest.worker_pool import shared_pool

log = logging.getLogger("adare_guest.serial")

READ_TIMEOUT = 0.1
"""Seconds one device read may block: how often the thread checks for stop and stalls."""
FRAME_TIMEOUT = 1.0
"""Seconds without a byte after which a half-received frame is answered PARTIAL_FRAME."""
WRITE_TIMEOUT = 5.0
HANDOFF_TIMEOUT = 30.0
"""Seconds the device thread waits for the loop to handle what it read."""
REOPEN_DELAY = 1.0
MAX_REOPEN_DELAY = 30.0


@dataclass(frozen=True)
class LinkOutput:
    """What one batch of input produced: bytes to write, whether to drain, events."""

    answer: bytes
    drain: bool
    events: list[LinkEvent]


class SessionLike(Protocol):
    """What the transport needs from a server session (``adare_guest.server.Session``)."""

    async def handle_text(self, text: str | bytes) -> None: ...

    async def close(self) -> None: ...


class ServerLike(Protocol):
    """What the transport needs from the server (``adare_guest.server.AdareVMServer``)."""

    def open_session(self, send: Callable[[str | bytes], Awaitable[None]], peer: str) -> Any: ...

    def health(self) -> dict[str, Any]: ...

    def record_error(self, message: str) -> None: ...


class DevicePort(Protocol):
    """The few calls of a pyserial ``Serial`` the transport uses."""

    @property
    def in_waiting(self) -> int: ...

    def read(self, size: int = 1) -> bytes: ...

    def write(self, data: bytes) -> int | None: ...

    def reset_input_buffer(self) -> None: ...

    def close(self) -> None: ...


class CharDevicePort:
    """A non-tty character device (virtio-serial port) with the DevicePort calls.

    pyserial insists on configuring a tty; a virtio-serial port is not one, so it is
    read and written directly with bounded ``select`` waits.
    """

    def __init__(self, path: str, *, timeout: float, write_timeout: float) -> None:
        self._fd = os.open(path, os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK)
        self._timeout = timeout
        self._write_timeout = write_timeout

    @property
    def in_waiting(self) -> int:
        return 4096 if select.select([self._fd], [], [], 0)[0] else 0

    def read(self, size: int = 1) -> bytes:
        if not select.select([self._fd], [], [], self._timeout)[0]:
            return b""
        try:
            data = os.read(self._fd, size)
        except BlockingIOError:
            return b""
        if not data:
            # A virtio-serial port reads as EOF while the host side is not connected:
            # wait out the timeout instead of spinning.
            time.sleep(self._timeout)
        return data

    def write(self, data: bytes) -> int:
        view, deadline = memoryview(data), time.monotonic() + self._write_timeout
        while view:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([], [self._fd], [], remaining)[1]:
                raise TimeoutError(f"device not writable for {self._write_timeout} s")
            with contextlib.suppress(BlockingIOError):
                view = view[os.write(self._fd, view) :]
        return len(data)

    def reset_input_buffer(self) -> None:
        for _ in range(1024):  # bounded: a peer that never stops talking cannot hold us
            if not self.read_available():
                return

    def read_available(self) -> bytes:
        if not select.select([self._fd], [], [], 0)[0]:
            return b""
        with contextlib.suppress(BlockingIOError):
            return os.read(self._fd, 65536)
        return b""

    def close(self) -> None:
        os.close(self._fd)


def open_device(device: str, *, baudrate: int = 115200) -> DevicePort:
    """Open ``device`` raw 8N1 with bounded reads and writes.

    ttys and COM ports go through pyserial; other character devices (virtio-serial
    ports) are opened directly.

    :raise OSError: the device cannot be opened (``serial.SerialException`` is one).
    """
    if os.name == "posix" and os.path.exists(device) and not _is_tty(device):
        return CharDevicePort(device, timeout=READ_TIMEOUT, write_timeout=WRITE_TIMEOUT)
    port: DevicePort = serial.serial_for_url(
        device,
        baudrate=baudrate,
        bytesize=serial.EIGHTBITS,
        parity=serial.PARITY_NONE,
        stopbits=serial.STOPBITS_ONE,
        timeout=READ_TIMEOUT,
        write_timeout=WRITE_TIMEOUT,
        xonxoff=False,
        rtscts=False,
    )
    _raise_rx_trigger(device)
    return port


def _raise_rx_trigger(device: str) -> None:
    """Ask a Linux 16550 for an interrupt per 14 received bytes instead of per 8.

    An emulated UART delivers only up to the trigger level per interrupt, and every
    interrupt is expensive in a TCG guest; best effort (needs root, 16550A or newer).
    """
    trigger = Path("/sys/class/tty") / Path(os.path.realpath(device)).name / "rx_trig_bytes"
    with contextlib.suppress(OSError):
        trigger.write_text("14")


def _is_tty(device: str) -> bool:
    try:
        fd = os.open(device, os.O_RDONLY | os.O_NOCTTY | os.O_NONBLOCK)
    except OSError:
        return True  # let pyserial report why it cannot be opened
    try:
        return os.isatty(fd)
    finally:
        os.close(fd)


class SerialTransport:
    """Serve the agent's protocol over the DV serial link on ``device``."""

    def __init__(
        self,
        server: ServerLike,
        device: str,
        *,
        baudrate: int = 115200,
        frame_timeout: float = FRAME_TIMEOUT,
        handoff_timeout: float = HANDOFF_TIMEOUT,
        reopen_delay: float = REOPEN_DELAY,
        open_port: Callable[[str], DevicePort] | None = None,
    ) -> None:
        self.server = server
        self.device = device
        self.frame_timeout = frame_timeout
        self.handoff_timeout = handoff_timeout
        self.reopen_delay = reopen_delay
        self._open_port = open_port or (lambda path: open_device(path, baudrate=baudrate))
        self.link = GuestLink(self._health)
        self._link_lock = threading.Lock()  # the device thread and the loop's send()
        self._session: SessionLike | None = None
        self._generation = 0
        self._closing: set[asyncio.Task[None]] = set()
        self._stop = threading.Event()

    # -- the loop side ---------------------------------------------------------------

    async def serve(self) -> None:
        """Serve until cancelled, reopening the device after failures.

        The pause before reopening starts at ``reopen_delay`` and doubles while the
        device keeps failing at once (up to :data:`MAX_REOPEN_DELAY`).
        """
        delay = self.reopen_delay
        try:
            while True:
                started = time.monotonic()
                try:
                    await self.serve_once()
                except OSError as exc:
                    self.server.record_error(f"serial device {self.device}: {exc}")
                if time.monotonic() - started > MAX_REOPEN_DELAY:
                    delay = self.reopen_delay  # it worked for a while: a fresh failure
                await asyncio.sleep(delay)
                delay = min(delay * 2, MAX_REOPEN_DELAY)
        finally:
            await self.close()

    async def serve_once(self) -> None:
        """Open the device and serve until it fails or the task is cancelled.

        :raise OSError: the device could not be opened or failed while serving.
        """
        port = await shared_pool().run(self._open_port, self.device)
        log.info("serial link on %s", self.device)
        loop = asyncio.get_running_loop()
        finished: asyncio.Future[BaseException | None] = loop.create_future()
        self._stop.clear()
        thread = threading.Thread(
            target=self._device_loop, args=(port, loop, finished), name="adare-serial", daemon=True
        )
        thread.start()
        try:
            error = await asyncio.shield(finished)
        finally:
            self._stop.set()
            await shared_pool().run(thread.join, READ_TIMEOUT + WRITE_TIMEOUT + 1)
            with contextlib.suppress(OSError):
                port.close()
        if error is not None:
            raise OSError(f"{type(error).__name__}: {error}") from error

    async def close(self) -> None:
        """Close the current session (cancelling its calls)."""
        with self._link_lock:
            self._generation += 1
        session, self._session = self._session, None
        if session is not None:
            await session.close()
        if self._closing:
            await asyncio.wait(set(self._closing), timeout=15)

    def process_input(self, data: bytes, *, stalled: bool = False) -> LinkOutput:
        """Feed bytes read from the device (or note a stall) to the link; thread-safe.

        ``stalled`` says no byte arrived for ``frame_timeout`` seconds. Runs in the device
        thread: link-level exchanges (fragments, polls, pings) are answered there without
        a trip through the event loop; only complete messages and session changes go
        to the loop (:meth:`dispatch`).
        """
        with self._link_lock:
            link = self.link
            if data:
                link.receive_data(data)
            elif stalled:
                partial = link.receive_timeout()
                if partial is not None:
                    log.warning("serial: %s", partial)
            events = link.events_received()
            if any(isinstance(e, (SessionRequested, SessionEnded)) for e in events):
                # From here on the old session's messages are dropped, not queued.
                self._generation += 1
            return LinkOutput(link.data_to_send(), link.take_drain_request(), events)

    async def dispatch(self, events: list[LinkEvent]) -> None:
        """Act on link events in order: session changes, messages into the session."""
        for event in events:
            if isinstance(event, SessionRequested):
                self._end_session()
                self._current_session()
            elif isinstance(event, SessionEnded):
                self._end_session()
            elif isinstance(event, MessageReceived):
                await self._current_session().handle_text(event.text)
            elif isinstance(event, BinaryReceived):
                await self._current_session().handle_text(event.data)

    def _health(self) -> dict[str, Any]:
        # Called in the device thread; health() only reads a few attributes.
        report = dict(self.server.health())
        report["serial_errors"] = self.link.errors
        return report

    def _current_session(self) -> SessionLike:
        if self._session is None:
            session: SessionLike = self.server.open_session(
                self._sender(self._generation), f"serial:{self.device}"
            )
            self._session = session
        return self._session

    def _end_session(self) -> None:
        """Close the current session in the background (its close waits for its calls)."""
        old, self._session = self._session, None
        if old is not None:
            task = asyncio.get_running_loop().create_task(old.close())
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    def _sender(self, generation: int) -> Callable[[str | bytes], Awaitable[None]]:
        async def send(text: str | bytes) -> None:
            try:
                with self._link_lock:
                    if generation != self._generation:
                        return  # a message of a session the host has ended or replaced
                    self.link.queue_message(text)
            except LinkError as exc:
                self.server.record_error(f"serial link: {exc}")

        return send

    # -- the device thread -----------------------------------------------------------

    def _device_loop(
        self,
        port: DevicePort,
        loop: asyncio.AbstractEventLoop,
        finished: asyncio.Future[BaseException | None],
    ) -> None:
        error: BaseException | None = None
        last_byte = time.monotonic()
        try:
            while not self._stop.is_set():
                data = port.read(1)
                if data and port.in_waiting:
                    data += port.read(min(port.in_waiting, 65536))
                now = time.monotonic()
                stalled = False
                if data:
                    last_byte = now
                elif self.link.frame_pending and now - last_byte >= self.frame_timeout:
                    stalled = True
                else:
                    continue
                self._serve_input(port, loop, data, stalled)
        except Exception as exc:  # the device failed: report it to the loop
            error = exc
        finally:
            with contextlib.suppress(RuntimeError):  # the loop is already closed
                loop.call_soon_threadsafe(_resolve, finished, error)

    def _serve_input(
        self, port: DevicePort, loop: asyncio.AbstractEventLoop, data: bytes, stalled: bool
    ) -> None:
        output = self.process_input(data, stalled=stalled)
        if output.drain:
            port.reset_input_buffer()
        if output.answer:
            try:
                port.write(output.answer)
            except (TimeoutError, BrokenPipeError, serial.SerialTimeoutException) as exc:
                # Nobody reads the other end (yet); a host that does will retransmit.
                log.warning("serial: answer not written: %s", exc)
        if output.events:
            # Waiting here keeps messages in order and bounds what the host can pile up.
            future = asyncio.run_coroutine_threadsafe(self.dispatch(output.events), loop)
            try:
                future.result(self.handoff_timeout)
            except concurrent.futures.TimeoutError:
                future.cancel()
                log.error(
                    "serial: the agent took over %s s to take a message", self.handoff_timeout
                )
            except Exception as exc:
                # One message's failure must not end the device loop (and with it every
                # call of the session): report it and keep serving.
                log.exception("serial: handling a message failed")
                self.server.record_error(f"serial: handling a message failed: {exc!r}"[:300])


def _resolve(future: asyncio.Future[BaseException | None], error: BaseException | None) -> None:
    if not future.done():
        future.set_result(error)
