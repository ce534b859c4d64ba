"""QGA through libvirt: a local socket speaking qemu-ga's line protocol, each command run
with ``virDomainQemuAgentCommand``.

libvirt owns the guest's ``org.qemu.guest_agent.0`` channel (it connects to it itself, so
``virDomainOpenChannel`` cannot), and hands single commands through. The
:class:`~pytest_adare.machine_tools.qga.AsyncQGAClient` at :attr:`QgaProxy.path` works unchanged:
``guest-sync-delimited`` is answered here (with qemu-ga's 0xFF delimiter) once a
``guest-ping`` through libvirt succeeded, so a sync still proves the guest's qemu-ga
answers; every other line goes to the guest and its answer (or libvirt's error, as a
QGA error object) comes back as one line.

Bounded: one client at a time, lines up to :data:`MAX_LINE` bytes, each command at
most :data:`COMMAND_TIMEOUT` seconds in libvirt.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

MAX_LINE = 64 << 20
COMMAND_TIMEOUT = 120
"""Seconds libvirt waits for qemu-ga's answer to one command."""
SYNC_RETRY = 0.5
AgentCommand = Callable[[str, int], str]
"""Runs one QGA command (JSON text) with a timeout in seconds; returns the answer text."""


class QgaProxy:
    """A Unix socket at ``path`` answering qemu-ga's protocol through ``command``."""

    def __init__(self, path: Path, command: AgentCommand) -> None:
        self.path = path
        self._command = command
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(os.fspath(path))
        self._listener.listen(2)
        self._closed = False
        self._client: socket.socket | None = None
        self._thread = threading.Thread(target=self._serve, name="qga proxy", daemon=True)

    def start(self) -> QgaProxy:
        self._thread.start()
        return self

    def _serve(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            self._client = client
            with contextlib.suppress(OSError), client:
                self._answer(client)

    def _answer(self, client: socket.socket) -> None:
        buffer = bytearray()
        while not self._closed:
            data = client.recv(65536)
            if not data:
                return
            buffer += data
            while (end := buffer.find(b"\n")) >= 0:
                line = bytes(buffer[:end]).strip(b"\xff \r")
                del buffer[: end + 1]
                if line:
                    client.sendall(self._reply(line))
            if len(buffer) > MAX_LINE:
                return

    def _reply(self, line: bytes) -> bytes:
        try:
            request = json.loads(line)
        except ValueError:
            return _error("JSONParsing", "the request is not JSON")
        if not isinstance(request, dict):
            return _error("JSONParsing", "the request is not a JSON object")
        if request.get("execute") == "guest-sync-delimited":
            return self._sync(request.get("arguments", {}).get("id"))
        try:
            answer = self._command(line.decode(), COMMAND_TIMEOUT)
        except Exception as exc:  # libvirt's error (agent not connected, timeout, ...)
            return _error("LibvirtError", " ".join(str(exc).split()))
        return answer.strip().encode() + b"\n"

    def _sync(self, token: Any) -> bytes:
        while not self._closed:
            try:
                self._command(json.dumps({"execute": "guest-ping"}), 5)
            except Exception:  # qemu-ga not up yet: the client keeps asking
                time.sleep(SYNC_RETRY)
                continue
            return b"\xff" + json.dumps({"return": token}).encode() + b"\n"
        return b""

    def close(self) -> None:
        """Stop serving and remove the socket."""
        self._closed = True
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        if self._client is not None:
            with contextlib.suppress(OSError):
                self._client.shutdown(socket.SHUT_RDWR)
        self._thread.join(5.0)
        with contextlib.suppress(OSError):
            self.path.unlink()


def _error(klass: str, description: str) -> bytes:
    return json.dumps({"error": {"class": klass, "desc": description}}).encode() + b"\n"
