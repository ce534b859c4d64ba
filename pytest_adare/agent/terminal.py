"""The host's end of a guest terminal (the agent's ``open_terminal``, docs/agent.md).

:class:`RemoteTerminal` opens a program on a pty in the guest and moves its bytes:
:meth:`~RemoteTerminal.read` gives the program's output as it comes (and acknowledges
it, which is what lets the guest read more: a host that stops reading stops the
program), :meth:`~RemoteTerminal.write` sends keystrokes within the guest's input
window, :meth:`~RemoteTerminal.resize`, :meth:`~RemoteTerminal.signal` and
:meth:`~RemoteTerminal.close` do what their names say. Both transports carry it.

The wire format is :mod:`adare_guest.terminal`. The guest is untrusted: its output is
bounded by the window we give it, and a message out of order ends the terminal.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import struct
from collections import deque
from collections.abc import Sequence
from typing import Any, Protocol

from adare_guest.binary_transfer import FrameKind, TransferFrame, encode_transfer_frame
from adare_guest.terminal import DEFAULT_WINDOW, READ_SIZE
from adare_guest.tool_names import OPEN_TERMINAL
from pytest_adare.errors import AgentDisconnected, ProtocolViolation, ToolError

INPUT_WINDOW = 64 * 1024
"""Keystroke bytes sent and not yet written to the guest's pty, at most."""


class TerminalTransport(Protocol):
    """What a terminal needs of a client (both :class:`CallRouter` clients have it)."""

    async def call(
        self, tool: str, params: dict[str, Any] | None = None, *, timeout: float | None = None
    ) -> dict[str, Any]: ...

    async def send_binary(self, data: bytes) -> None: ...

    def attach_terminal(self, terminal_id: int, sink: Any) -> None: ...

    def detach_terminal(self, terminal_id: int) -> None: ...


class RemoteTerminal:
    """One program on a pty in the guest. Use :meth:`open`."""

    def __init__(self, connection: TerminalTransport, terminal_id: int, window: int) -> None:
        self._connection = connection
        self.terminal_id = terminal_id
        self._window = window
        self._output: deque[bytes] = deque()
        self._arrived = asyncio.Event()
        self._received = 0  # output bytes taken from the guest
        self._sent = 0  # input bytes sent
        self._acked_input = 0
        self._input_credit = asyncio.Event()
        self._ended = False
        self.failure: Exception | None = None
        self.exit_code: int | None = None
        """The program's exit status once it ended (None: killed by :attr:`exit_signal`)."""
        self.exit_signal: int | None = None
        self.info: dict[str, Any] = {}
        """The ``open_terminal`` answer (pid, user, command)."""

    @classmethod
    async def open(
        cls,
        connection: TerminalTransport,
        command: Sequence[str] | None = None,
        *,
        run_as_user: str | None = None,
        rows: int = 24,
        cols: int = 80,
        term: str = "xterm",
        env: dict[str, str] | None = None,
        window: int = DEFAULT_WINDOW,
    ) -> RemoteTerminal:
        """Start ``command`` (default: the user's login shell) on a pty in the guest.

        :raise ToolError: the guest refused (no such user, not root, too many terminals).
        :raise AgentDisconnected: the connection is gone.
        """
        terminal = cls(connection, secrets.randbelow(0xFFFFFFFF) + 1, window)
        connection.attach_terminal(terminal.terminal_id, terminal._feed)
        params: dict[str, Any] = {
            "terminal_id": terminal.terminal_id,
            "rows": rows,
            "cols": cols,
            "term": term,
            "window": window,
        }
        if command:
            params["command"] = list(command)
        if run_as_user is not None:
            params["run_as_user"] = run_as_user
        if env:
            params["env"] = dict(env)
        try:
            result = await connection.call(OPEN_TERMINAL, params)
            if result.get("status") != "success":
                raise ToolError(OPEN_TERMINAL, str(result.get("message")), result)
        except BaseException:
            connection.detach_terminal(terminal.terminal_id)
            raise
        terminal.info = result
        return terminal

    # -- from the guest (on the loop; never raises) -------------------------------------

    def _feed(self, frame: TransferFrame | None) -> None:
        if self._ended:
            return
        if frame is None:
            self._end(AgentDisconnected("the agent connection closed under the terminal"))
        elif frame.kind is FrameKind.TERMINAL_DATA:
            unread = sum(map(len, self._output)) + len(frame.payload)
            if frame.offset != self._received or unread > self._window + READ_SIZE:
                self._end(ProtocolViolation(f"terminal {self.terminal_id}: output out of window"))
                return
            self._received += len(frame.payload)
            self._output.append(frame.payload)
        elif frame.kind is FrameKind.TERMINAL_ACK:
            if self._acked_input < frame.offset <= self._sent:
                self._acked_input = frame.offset
                self._input_credit.set()
        elif frame.kind is FrameKind.TERMINAL_EXIT:
            try:
                status = json.loads(frame.payload.decode())
                self.exit_code = _optional_int(status.get("exit_code"))
                self.exit_signal = _optional_int(status.get("signal"))
            except (ValueError, AttributeError):
                self.exit_code = None
            self._end(None)
        self._arrived.set()

    def _end(self, failure: Exception | None) -> None:
        self._ended = True
        self.failure = failure
        self._connection.detach_terminal(self.terminal_id)
        self._arrived.set()
        self._input_credit.set()

    # -- the host's side -------------------------------------------------------------------

    @property
    def ended(self) -> bool:
        """The program ended (or the connection went) and all its output was read."""
        return self._ended and not self._output

    async def read(self) -> bytes:
        """The next output bytes; ``b""`` once the terminal ended (see :attr:`exit_code`).

        :raise AgentDisconnected: the connection went before the program ended.
        """
        while not self._output:
            if self._ended:
                if self.failure is not None:
                    raise self.failure
                return b""
            self._arrived.clear()
            await self._arrived.wait()
        data = self._output.popleft()
        if not self._ended:
            consumed = self._received - sum(map(len, self._output))
            await self._send(FrameKind.TERMINAL_ACK, consumed)
        return data

    async def write(self, data: bytes) -> None:
        """Send keystrokes (waits while the guest's input window is full)."""
        view = memoryview(data)
        while view:
            while self._sent - self._acked_input >= INPUT_WINDOW and not self._ended:
                self._input_credit.clear()
                await self._input_credit.wait()
            if self._ended:
                return
            room = INPUT_WINDOW - (self._sent - self._acked_input)
            piece = bytes(view[:room])
            view = view[room:]
            offset, self._sent = self._sent, self._sent + len(piece)
            await self._send(FrameKind.TERMINAL_DATA, offset, piece)

    async def resize(self, rows: int, cols: int) -> None:
        """Set the guest pty's window size (its program gets SIGWINCH)."""
        await self._send(FrameKind.TERMINAL_RESIZE, 0, struct.pack(">HH", rows, cols))

    async def signal(self, signum: int) -> None:
        """Send ``signum`` to the terminal's foreground process group."""
        await self._send(FrameKind.TERMINAL_SIGNAL, signum)

    async def close(self) -> None:
        """Hang the terminal up (the guest's programs get SIGHUP); no wait."""
        await self._send(FrameKind.TERMINAL_CLOSE, 0)

    async def wait(self) -> int | None:
        """Read (and drop) output until the program ends; its exit code."""
        while await self.read():
            pass
        return self.exit_code

    async def _send(self, kind: FrameKind, offset: int, payload: bytes = b"") -> None:
        if self._ended:
            return
        await self._connection.send_binary(
            encode_transfer_frame(kind, self.terminal_id, offset, payload)
        )


def _optional_int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
