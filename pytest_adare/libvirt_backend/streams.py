"""libvirt streams (a domain's consoles and virtio-serial channels) as local byte streams.

The agent's serial link and QGA are spoken by clients that connect to a Unix socket
(:class:`~pytest_adare.agent.serial_client.SerialAgentClient`,
:class:`~pytest_adare.qemu.qga.AsyncQGAClient`). :class:`StreamBridge` listens on such
a socket and, for each connection, opens a fresh libvirt stream to the guest device
(``virDomainOpenConsole`` / ``virDomainOpenChannel`` with FORCE, so an old stream is
dropped) and moves bytes both ways in two threads. The stream goes through the libvirt
connection, so it works the same to a daemon on another host (``qemu+ssh://``).

:class:`StreamPump` reads one stream (the console) and hands each chunk to a callback.

Bounded: a bridge holds one connection at a time (a new one replaces it); reads are
64 KiB at a time; nothing is buffered beyond what the socket itself holds.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pytest_adare.libvirt_backend.connection import libvirt_module

READ_SIZE = 65536
StreamOpener = Callable[[], Any]
"""Opens a new (blocking) ``virStream`` to the guest device."""


def _abort(stream: Any) -> None:
    with contextlib.suppress(Exception):
        stream.abort()


class StreamPump:
    """A thread reading ``stream`` until it ends; chunks go to ``on_data``, the end
    (EOF or error, with its text) to ``on_end``."""

    def __init__(
        self,
        stream: Any,
        on_data: Callable[[bytes], None],
        on_end: Callable[[str], None],
        name: str,
    ) -> None:
        self.stream = stream
        self._on_data = on_data
        self._on_end = on_end
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        libvirt = libvirt_module()
        why = "end of stream"
        try:
            while True:
                data = self.stream.recv(READ_SIZE)
                if not isinstance(data, bytes) or not data:
                    break
                self._on_data(data)
        except libvirt.libvirtError as exc:
            why = str(exc)
        if not self._stopping:
            self._on_end(why)

    def send(self, data: bytes) -> None:
        """Write to the stream (the console's input)."""
        view = memoryview(data)
        while view:
            sent = self.stream.send(bytes(view[:READ_SIZE]))
            if sent <= 0:
                return
            view = view[sent:]

    def stop(self) -> None:
        self._stopping = True
        _abort(self.stream)
        self._thread.join(5.0)


class StreamBridge:
    """A Unix socket at ``path`` whose connections are joined to fresh libvirt streams."""

    def __init__(self, path: Path, opener: StreamOpener, what: str) -> None:
        self.path = path
        self.what = what
        self._opener = opener
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(os.fspath(path))
        self._listener.listen(4)
        self._lock = threading.Lock()
        self._current: tuple[socket.socket, Any] | None = None
        self._closed = False
        self._thread = threading.Thread(target=self._accept_loop, name=f"bridge {what}",
                                        daemon=True)  # fmt: skip

    def start(self) -> StreamBridge:
        self._thread.start()
        return self

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            try:
                stream = self._opener()
            except Exception:  # the device is not there (yet): the client sees a close
                conn.close()
                continue
            with self._lock:
                self._drop_current()
                self._current = (conn, stream)
            threading.Thread(target=self._to_socket, args=(conn, stream), daemon=True,
                             name=f"bridge {self.what} out").start()  # fmt: skip
            threading.Thread(target=self._to_stream, args=(conn, stream), daemon=True,
                             name=f"bridge {self.what} in").start()  # fmt: skip

    def _to_socket(self, conn: socket.socket, stream: Any) -> None:
        with contextlib.suppress(Exception):
            while True:
                data = stream.recv(READ_SIZE)
                if not isinstance(data, bytes) or not data:
                    break
                conn.sendall(data)
        self._end(conn, stream)

    def _to_stream(self, conn: socket.socket, stream: Any) -> None:
        with contextlib.suppress(Exception):
            while True:
                data = conn.recv(READ_SIZE)
                if not data:
                    break
                view = memoryview(data)
                while view:
                    sent = stream.send(bytes(view))
                    if sent <= 0:
                        raise OSError(f"stream send returned {sent}")
                    view = view[sent:]
        self._end(conn, stream)

    def _end(self, conn: socket.socket, stream: Any) -> None:
        with self._lock:
            if self._current == (conn, stream):
                self._current = None
        with contextlib.suppress(OSError):
            conn.shutdown(socket.SHUT_RDWR)
        conn.close()
        _abort(stream)

    def _drop_current(self) -> None:
        if self._current is not None:
            conn, stream = self._current
            self._current = None
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()
            _abort(stream)

    def close(self) -> None:
        """Stop accepting, end the current connection, remove the socket."""
        self._closed = True
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        with self._lock:
            self._drop_current()
        with contextlib.suppress(OSError):
            self.path.unlink()
