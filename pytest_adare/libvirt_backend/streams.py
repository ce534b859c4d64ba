"""libvirt streams (a domain's consoles and virtio-serial channels) as local byte streams.

The agent's serial link and QGA are spoken by clients that connect to a Unix socket
(:class:`~pytest_adare.agent.serial_client.SerialAgentClient`,
:class:`~pytest_adare.machine_tools.qga.AsyncQGAClient`). :class:`StreamBridge` listens on such
a socket and, for each connection, opens a fresh libvirt stream to the guest device
(``virDomainOpenConsole`` / ``virDomainOpenChannel`` with FORCE, so an old stream is
dropped) and moves bytes both ways. The stream goes through the libvirt connection, so
it works the same to a daemon on another host (``qemu+ssh://``).

:class:`StreamPump` reads one stream (the console) and hands each chunk to a callback.

All stream I/O runs on libvirt's event loop thread
(:func:`~.connection.on_event_thread`), non-blocking, as ``virsh console`` does it: a
stream is never used by two threads at once (blocking streams read in one thread while
another aborted them hung libvirtd here). Bounded: a bridge holds one connection at a
time (a new one replaces it), reads 64 KiB at a time, and stops reading its socket while
more than :data:`MAX_PENDING` bytes wait for the stream.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pytest_adare.libvirt_backend.connection import libvirt_module, on_event_thread

READ_SIZE = 65536
MAX_PENDING = 1 << 20
SOCKET_SEND_TIMEOUT = 10.0
"""Bound on handing the guest's bytes to the local client (it reads all the time)."""
CLOSE_TIMEOUT = 5.0
StreamOpener = Callable[[], Any]
"""Opens a new non-blocking ``virStream`` to the guest device."""


def _stream_events(*, writable: bool) -> int:
    libvirt = libvirt_module()
    events: int = (
        libvirt.VIR_STREAM_EVENT_READABLE
        | libvirt.VIR_STREAM_EVENT_ERROR
        | libvirt.VIR_STREAM_EVENT_HANGUP
    )
    return events | (libvirt.VIR_STREAM_EVENT_WRITABLE if writable else 0)


class _Writer:
    """Bytes waiting for a non-blocking stream (only touched on the event thread)."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.pending = bytearray()

    def flush(self) -> None:
        """Send what the stream takes now; ask for WRITABLE events while bytes remain."""
        while self.pending:
            sent = self.stream.send(bytes(self.pending[:READ_SIZE]))
            if sent == -2:
                break
            if sent <= 0:
                raise OSError(f"the libvirt stream refused data (send returned {sent})")
            del self.pending[:sent]
        self.stream.eventUpdateCallback(_stream_events(writable=bool(self.pending)))


class StreamPump:
    """Reads a non-blocking ``stream`` until it ends: chunks go to ``on_data``, the end
    (EOF, error or hang-up, with a reason) to ``on_end``; :meth:`send` writes to it."""

    def __init__(
        self,
        stream: Any,
        on_data: Callable[[bytes], None],
        on_end: Callable[[str], None],
    ) -> None:
        self._writer = _Writer(stream)
        self._on_data = on_data
        self._on_end = on_end
        self._ended = False

    def start(self) -> None:
        on_event_thread(self._register)

    def _register(self) -> None:
        self._writer.stream.eventAddCallback(_stream_events(writable=False), self._event, None)

    def _event(self, stream: Any, events: int, opaque: object) -> None:
        libvirt = libvirt_module()
        try:
            if events & libvirt.VIR_STREAM_EVENT_WRITABLE:
                self._writer.flush()
            if events & libvirt.VIR_STREAM_EVENT_READABLE:
                data = stream.recv(READ_SIZE)
                if isinstance(data, bytes):
                    if not data:
                        self._end("end of stream")
                        return
                    self._on_data(data)
            if events & (libvirt.VIR_STREAM_EVENT_ERROR | libvirt.VIR_STREAM_EVENT_HANGUP):
                self._end("the stream failed or hung up")
        except Exception as exc:  # on libvirt's event thread: nobody else would see it
            self._end(f"{type(exc).__name__}: {exc}")

    def _end(self, why: str, notify: bool = True) -> None:
        if self._ended:
            return
        self._ended = True
        with contextlib.suppress(Exception):
            self._writer.stream.eventRemoveCallback()
        with contextlib.suppress(Exception):
            self._writer.stream.abort()
        if notify:
            self._on_end(why)

    def send(self, data: bytes) -> None:
        """Queue ``data`` for the stream (the console's input)."""

        def queue() -> None:
            if not self._ended:
                self._writer.pending += data
                with contextlib.suppress(Exception):
                    self._writer.flush()

        on_event_thread(queue)

    def stop(self) -> None:
        """End the stream without calling ``on_end`` (waits for the event thread)."""
        done = threading.Event()

        def stop() -> None:
            self._end("stopped", notify=False)
            done.set()

        on_event_thread(stop)
        done.wait(CLOSE_TIMEOUT)


class _Link:
    """One client connection joined to one stream (only touched on the event thread)."""

    def __init__(self, client: socket.socket, stream: Any) -> None:
        self.client = client
        self.writer = _Writer(stream)
        self.watch: int | None = None
        self.closed = False


class StreamBridge:
    """A Unix socket at ``path`` whose connections are joined to fresh libvirt streams."""

    def __init__(self, path: Path, opener: StreamOpener, what: str) -> None:
        self.path = path
        self.what = what
        self._opener = opener
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(os.fspath(path))
        self._listener.listen(4)
        self._current: _Link | None = None
        self._closed = False
        self._thread = threading.Thread(
            target=self._accept_loop, name=f"libvirt bridge {what}", daemon=True
        )

    def start(self) -> StreamBridge:
        self._thread.start()
        return self

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                stream = self._opener()
            except Exception:  # the device is not there (yet): the client sees a close
                client.close()
                continue
            client.settimeout(SOCKET_SEND_TIMEOUT)
            link = _Link(client, stream)
            on_event_thread(lambda link=link: self._attach(link))  # type: ignore[misc]

    def _attach(self, link: _Link) -> None:
        libvirt = libvirt_module()
        if self._current is not None:
            self._drop(self._current)
        if self._closed:
            self._drop(link)
            return
        self._current = link
        try:
            link.writer.stream.eventAddCallback(
                _stream_events(writable=False), self._stream_event, link
            )
            link.watch = libvirt.virEventAddHandle(
                link.client.fileno(), libvirt.VIR_EVENT_HANDLE_READABLE, self._client_event, link
            )
        except Exception:
            self._drop(link)

    def _stream_event(self, stream: Any, events: int, link: _Link) -> None:
        libvirt = libvirt_module()
        try:
            if events & libvirt.VIR_STREAM_EVENT_WRITABLE:
                link.writer.flush()
                self._resume_client(link)
            if events & libvirt.VIR_STREAM_EVENT_READABLE:
                data = stream.recv(READ_SIZE)
                if isinstance(data, bytes):
                    if not data:
                        raise EOFError("end of stream")
                    link.client.sendall(data)
            if events & (libvirt.VIR_STREAM_EVENT_ERROR | libvirt.VIR_STREAM_EVENT_HANGUP):
                raise EOFError("the stream failed or hung up")
        except Exception:  # on libvirt's event thread: the client sees the close
            self._drop(link)

    def _client_event(self, watch: int, fd: int, events: int, link: _Link) -> None:
        libvirt = libvirt_module()
        try:
            data = link.client.recv(READ_SIZE)
            if not data:
                raise EOFError("the client closed")
            link.writer.pending += data
            link.writer.flush()
            if len(link.writer.pending) > MAX_PENDING and link.watch is not None:
                libvirt.virEventUpdateHandle(link.watch, 0)
        except Exception:
            self._drop(link)

    def _resume_client(self, link: _Link) -> None:
        libvirt = libvirt_module()
        if link.watch is not None and len(link.writer.pending) <= MAX_PENDING:
            libvirt.virEventUpdateHandle(link.watch, libvirt.VIR_EVENT_HANDLE_READABLE)

    def _drop(self, link: _Link) -> None:
        libvirt = libvirt_module()
        if link.closed:
            return
        link.closed = True
        if self._current is link:
            self._current = None
        if link.watch is not None:
            with contextlib.suppress(Exception):
                libvirt.virEventRemoveHandle(link.watch)
        with contextlib.suppress(Exception):
            link.writer.stream.eventRemoveCallback()
        with contextlib.suppress(Exception):
            link.writer.stream.abort()
        with contextlib.suppress(OSError):
            link.client.shutdown(socket.SHUT_RDWR)
        link.client.close()

    def close(self) -> None:
        """Stop accepting, end the current connection, remove the socket."""
        self._closed = True
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        self._thread.join(CLOSE_TIMEOUT)
        done = threading.Event()

        def drop() -> None:
            if self._current is not None:
                self._drop(self._current)
            done.set()

        on_event_thread(drop)
        done.wait(CLOSE_TIMEOUT)
        with contextlib.suppress(OSError):
            self.path.unlink()
