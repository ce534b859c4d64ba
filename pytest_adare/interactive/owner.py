"""The owner's side of a registered VM: its socket serves terminals, screenshots, stop.

Whoever keeps a VM running (a paused pytest run, ``adare-vm run``, a keeper) runs one
:class:`OwnerServer` per VM on the shared loop. Each client connection is one request
(:mod:`pytest_adare.interactive.wire`); a shell is a :class:`RemoteTerminal` on the VM's
own agent connection, so it works on both transports and needs no second connection.
Bytes move only as fast as the client takes them (``drain``), which is what throttles
the guest program when nobody reads.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import struct
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol

from pytest_adare.agent.terminal import RemoteTerminal, TerminalTransport
from pytest_adare.interactive.wire import (
    Kind,
    WireError,
    encode,
    encode_json,
    parse_json,
    read_frame,
)

log = logging.getLogger(__name__)


class Reachable(Protocol):
    """What the owner needs of a VM."""

    def connection(self) -> TerminalTransport:
        """The VM's agent connection."""

    async def screen_png(self) -> bytes:
        """A screenshot as PNG bytes."""


class OwnerServer:
    """Serve one VM on ``socket`` (created 0600); ``on_stop`` runs for ``adare-vm stop``."""

    def __init__(
        self, vm: Reachable, socket: Path, on_stop: Callable[[], Awaitable[None] | None]
    ) -> None:
        self.vm = vm
        self.socket = socket
        self._on_stop = on_stop
        self._server: asyncio.AbstractServer | None = None
        self.sessions = 0
        self.last_active = time.monotonic()
        self.stop_requested = asyncio.Event()

    async def start(self) -> None:
        """Listen on the socket (only the user may connect: 0600, in a 0700 directory)."""
        with contextlib.suppress(FileNotFoundError):
            self.socket.unlink()
        old = os.umask(0o177)
        try:
            self._server = await asyncio.start_unix_server(self._serve, path=str(self.socket))
        finally:
            os.umask(old)
        os.chmod(self.socket, 0o600)

    async def close(self) -> None:
        """Stop listening and remove the socket."""
        if self._server is not None:
            self._server.close()
            self._server = None
        with contextlib.suppress(FileNotFoundError):
            self.socket.unlink()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.sessions += 1
        self.last_active = time.monotonic()
        try:
            frame = await read_frame(reader)
            if frame is None or frame[0] is not Kind.REQUEST:
                raise WireError("the first frame must be a request")
            request = parse_json(frame[1])
            op = request.get("op")
            if op == "ping":
                writer.write(encode_json(Kind.RESULT, {"ok": True}))
            elif op == "screen":
                writer.write(encode(Kind.PNG, await self.vm.screen_png()))
            elif op == "stop":
                writer.write(encode_json(Kind.RESULT, {"ok": True}))
                await writer.drain()
                self.stop_requested.set()
                result = self._on_stop()
                if result is not None:
                    await result
            elif op == "shell":
                await self._shell(request, reader, writer)
            else:
                raise WireError(f"unknown op {op!r}")
            await writer.drain()
        except Exception as exc:
            log.info("owner request failed: %s", exc)
            with contextlib.suppress(Exception):
                writer.write(encode(Kind.ERROR, f"{type(exc).__name__}: {exc}".encode()))
                await writer.drain()
        finally:
            self.sessions -= 1
            self.last_active = time.monotonic()
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _shell(
        self, request: dict[str, Any], reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        command = request.get("command")
        terminal = await RemoteTerminal.open(
            self.vm.connection(),
            [str(a) for a in command] if isinstance(command, list) else None,
            run_as_user=request.get("user") if isinstance(request.get("user"), str) else None,
            rows=int(request.get("rows", 24)),
            cols=int(request.get("cols", 80)),
            term=str(request.get("term", "xterm")),
        )

        async def client_to_guest() -> None:
            while (frame := await read_frame(reader)) is not None:
                kind, payload = frame
                self.last_active = time.monotonic()
                if kind is Kind.DATA:
                    await terminal.write(payload)
                elif kind is Kind.RESIZE and len(payload) == 4:
                    await terminal.resize(*struct.unpack(">HH", payload))
            await terminal.close()  # the client went: hang up

        upstream = asyncio.create_task(client_to_guest())
        try:
            while data := await terminal.read():
                writer.write(encode(Kind.DATA, data))
                await writer.drain()
                self.last_active = time.monotonic()
            writer.write(
                encode_json(
                    Kind.EXIT, {"exit_code": terminal.exit_code, "signal": terminal.exit_signal}
                )
            )
        finally:
            upstream.cancel()
            with contextlib.suppress(BaseException):
                await upstream
            if not terminal.ended:
                with contextlib.suppress(Exception):
                    await terminal.close()
