"""The host's hub for one LAN segment: it joins the members' QEMU ``dgram`` netdevs and
is the segment's capture point.

Each member has two Unix datagram sockets in the LAN's private (0700) directory: its
QEMU binds ``m<N>.sock`` and sends every frame to ``f<N>.sock``, which the forwarder
binds. A frame read from one member is written to every capture (tap) and sent to every
other member (a hub: the guests' NICs drop what is not theirs). Nothing here is
reachable from outside the directory, and each segment has its own: two sessions or
xdist workers never share a frame.

A port is closed until :meth:`Forwarder.admit`: the LAN admits a member once it has
given the member its MAC and address and switched IPv6 off. Until then what its guest
sends is dropped (the boot's router solicitations, a warm start's announcements of the
saved MAC and of the user network's 10.0.2.15) and nothing is sent to it.

Bounds: a frame a member cannot take at once (its socket's queue is full) waits in that
member's queue of at most ``queue_frames`` frames; beyond that the oldest is dropped and
counted (``dropped``), as a switch drops when a port is congested. A member that is not
running (no QEMU bound to its socket yet, or it died) loses what is sent to it.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

QUEUE_FRAMES = 512
"""Frames one member may have waiting (about 750 KiB of full-size frames)."""
MAX_FRAME = 65536
RETRY_SECONDS = 0.001
"""How soon a full member's queue is tried again (a Unix datagram socket signals no
room per destination, so waiting frames are retried on a short timer)."""


class FrameTap(Protocol):
    """Where a copy of every frame goes (``PcapWriter`` fits)."""

    def write(self, frame: bytes, at: float | None = None) -> None: ...


@dataclass
class _Port:
    name: str
    qemu_path: str
    sock: socket.socket
    admitted: bool = False
    queue: deque[bytes] = field(default_factory=deque)
    received: int = 0
    dropped: int = 0


class Forwarder:
    """The hub of one segment, running in its own thread from :meth:`start` to :meth:`close`."""

    def __init__(self, directory: Path, *, queue_frames: int = QUEUE_FRAMES) -> None:
        if queue_frames < 1:
            raise ValueError(f"queue_frames must be at least 1, got {queue_frames}")
        self.directory = directory
        self.queue_frames = queue_frames
        self._ports: dict[str, _Port] = {}
        self._taps: list[FrameTap] = []
        self._lock = threading.Lock()
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ)
        self._closed = False
        self._count = 0
        self._thread = threading.Thread(target=self._run, name="adare-lan", daemon=True)

    def start(self) -> Forwarder:
        self._thread.start()
        return self

    def add_port(self, name: str) -> tuple[str, str]:
        """A new member's socket pair: (the path its QEMU binds, the forwarder's path)."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the forwarder is closed")
            number = self._count
            self._count += 1
            qemu_path = str(self.directory / f"m{number}.sock")
            own_path = str(self.directory / f"f{number}.sock")
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            sock.bind(own_path)
            sock.setblocking(False)
            self._ports[name] = _Port(name, qemu_path, sock)
        self._selector.register(sock, selectors.EVENT_READ, name)
        self._wake()
        return qemu_path, own_path

    def admit(self, name: str) -> None:
        """Open a member's port: from now on its frames are on the segment and it gets
        the others'.

        :raise KeyError: no such port."""
        with self._lock:
            self._ports[name].admitted = True

    def remove_port(self, name: str) -> None:
        """Forget a member (its frames are no longer read or sent)."""
        with self._lock:
            port = self._ports.pop(name, None)
        if port is not None:
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(port.sock)
            port.sock.close()

    def add_tap(self, tap: FrameTap) -> None:
        with self._lock:
            self._taps.append(tap)

    def remove_tap(self, tap: FrameTap) -> None:
        with self._lock, contextlib.suppress(ValueError):
            self._taps.remove(tap)

    def dropped(self) -> dict[str, int]:
        """Frames each member lost to a full queue."""
        with self._lock:
            return {name: port.dropped for name, port in self._ports.items()}

    def close(self) -> None:
        """Stop the thread and close every socket (safe to call twice)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._wake()
        if self._thread.is_alive():
            self._thread.join(5.0)
        for name in list(self._ports):
            self.remove_port(name)
        self._selector.close()
        self._wake_r.close()
        self._wake_w.close()

    def _wake(self) -> None:
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")

    def _run(self) -> None:
        while not self._closed:
            with self._lock:
                ports = list(self._ports.values())
            waiting = any(port.queue for port in ports)
            for key, _ in self._selector.select(RETRY_SECONDS if waiting else None):
                if key.fileobj is self._wake_r:
                    with contextlib.suppress(OSError):
                        self._wake_r.recv(4096)
                else:
                    self._receive(key.data)
            for port in ports:
                self._flush(port)

    def _receive(self, name: str) -> None:
        port = self._ports.get(name)
        if port is None:
            return
        for _ in range(64):  # a burst, then the others get their turn
            try:
                frame, sender = port.sock.recvfrom(MAX_FRAME)
            except (BlockingIOError, OSError):
                return
            if sender != port.qemu_path or not port.admitted:
                continue  # only the member's own QEMU speaks on its socket, once admitted
            port.received += 1
            at = time.time()
            with self._lock:
                taps = list(self._taps)
                others = [p for p in self._ports.values() if p is not port and p.admitted]
            for tap in taps:
                tap.write(frame, at)
            for other in others:
                self._send(other, frame)

    def _send(self, port: _Port, frame: bytes) -> None:
        if port.queue:
            self._enqueue(port, frame)
            return
        try:
            port.sock.sendto(frame, port.qemu_path)
        except BlockingIOError:
            self._enqueue(port, frame)
        except OSError:
            pass  # the member's QEMU is not (or no longer) there: the frame is lost

    def _enqueue(self, port: _Port, frame: bytes) -> None:
        if len(port.queue) >= self.queue_frames:
            port.queue.popleft()
            port.dropped += 1
        port.queue.append(frame)

    def _flush(self, port: _Port) -> None:
        while port.queue:
            try:
                port.sock.sendto(port.queue[0], port.qemu_path)
            except BlockingIOError:
                return
            except OSError:
                port.queue.clear()
                return
            port.queue.popleft()
