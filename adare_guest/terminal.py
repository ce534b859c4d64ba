"""Terminals: a program on a pseudo-terminal in the guest, its bytes streamed both ways.

The ``open_terminal`` tool (:mod:`adare_guest.tools.terminal`) starts a program on a
new pty and returns; from then on the terminal lives in the session's binary streams,
in messages with the binary transfer header (:mod:`adare_guest.binary_transfer`,
``transfer_id`` = the host's terminal id). Kinds:

- ``TERMINAL_DATA``: bytes; guest→host the program's output, host→guest keystrokes.
  ``offset`` is the position of the first byte in that direction's stream.
- ``TERMINAL_ACK``: the receiver has taken everything before ``offset``. Each side
  keeps at most a window of bytes unacknowledged; the guest stops reading the pty
  when the host's window is full, so a slow host throttles the program (its writes
  block) instead of filling the agent's memory.
- ``TERMINAL_RESIZE`` (host): payload ``rows u16 | cols u16``; the program gets SIGWINCH.
- ``TERMINAL_SIGNAL`` (host): ``offset`` is a signal number, sent to the foreground
  process group. Ctrl-C needs none: the pty turns the byte 0x03 into SIGINT.
- ``TERMINAL_CLOSE`` (host): hang up (SIGHUP to the session, SIGKILL 2 s later).
- ``TERMINAL_EXIT`` (guest): the program ended and the terminal is gone; payload
  JSON ``{"exit_code": int | null, "signal": int | null}``. Always the last message.

Only the standard library: ``pty`` for the pair, ``termios``/``fcntl`` for the window
size and the controlling terminal, process groups so a hang-up reaches every process.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import logging
import os
import signal
import struct
import subprocess
import sys
from collections.abc import Callable
from typing import Any

from adare_guest.binary_transfer import (
    TERMINAL_KINDS,
    FrameKind,
    SendBinary,
    TransferFrame,
    Transfers,
    encode_transfer_frame,
)
from adare_guest.testfunctions.functions import SESSION_ENV

log = logging.getLogger("adare_guest.terminal")

READ_SIZE = 16 * 1024
"""Bytes read from the pty at once (one DATA message at most)."""
DEFAULT_WINDOW = 256 * 1024
"""Output bytes the host may leave unacknowledged before the guest stops reading."""
MAX_WINDOW = 4 * 1024 * 1024
MAX_PENDING_INPUT = 1024 * 1024
"""Keystrokes not yet written to the pty; a host that sends more breaks its terminal."""
MAX_TERMINALS = 8
"""Terminals one session may have open at once."""
HANGUP_GRACE = 2.0
"""Seconds between SIGHUP and SIGKILL when a terminal is closed."""
DRAIN_AFTER_EXIT = 0.5
"""Seconds output is still read after the program exited (a background job may hold
the pty open; its output does not keep the terminal alive)."""
ALLOWED_SIGNALS = frozenset(
    int(getattr(signal, name))
    for name in (
        "SIGINT",
        "SIGTERM",
        "SIGHUP",
        "SIGQUIT",
        "SIGKILL",
        "SIGTSTP",
        "SIGCONT",
        "SIGUSR1",
        "SIGUSR2",
        "SIGWINCH",
    )
    if hasattr(signal, name)
)
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# The child becomes a session leader (Popen start_new_session) and then takes its pty
# as controlling terminal before exec, so job control and Ctrl-C work; every signal is
# at its default and none blocked, as a login leaves them (the shim's own Python ignores
# SIGPIPE, and an agent started in a script's background ignores SIGINT: exec keeps an
# ignored signal, and ^C would stop nothing). A shim rather than preexec_fn: code
# between fork and exec is unsafe in the agent's threads.
_CTTY_SHIM = (
    "import fcntl,os,signal,sys,termios\n"
    "for s in signal.Signals:\n"
    "    if s not in (signal.SIGKILL, signal.SIGSTOP):\n"
    "        signal.signal(s, signal.SIG_DFL)\n"
    "signal.pthread_sigmask(signal.SIG_SETMASK, ())\n"
    "fcntl.ioctl(0, termios.TIOCSCTTY, 0)\n"
    "try:\n"
    "    os.execvp(sys.argv[1], sys.argv[1:])\n"
    "except OSError as e:\n"
    "    sys.stderr.write('cannot run %s: %s\\r\\n' % (sys.argv[1], e.strerror))\n"
    "    sys.exit(127)\n"
)


def _shim_python() -> str:
    # The system's interpreter when there is one, else the agent's real one (not a
    # virtualenv's link): another user may not be allowed into the agent's directory.
    # The shim needs only the standard library of any Python 3.
    for candidate in ("/usr/bin/python3", os.path.realpath(sys.executable)):
        if os.path.exists(candidate):
            return candidate
    return sys.executable


class TerminalError(ValueError):
    """A terminal cannot be opened; the message says why."""


def set_window_size(fd: int, rows: int, cols: int) -> None:
    """Set the pty's window size (the kernel sends SIGWINCH to its foreground group)."""
    # Deferred: fcntl and termios do not exist on Windows, where this module imports.
    import fcntl
    import termios

    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def check_size(rows: int, cols: int) -> None:
    """:raise TerminalError: not a window size a pty takes."""
    if not (1 <= rows <= 0xFFFF and 1 <= cols <= 0xFFFF):
        raise TerminalError(f"window size must be 1..65535 rows and columns, got {rows}x{cols}")


def session_environment(user: str, session_env: str = SESSION_ENV) -> dict[str, str]:
    """The desktop session's environment when ``user`` is its user, else ``{}``.

    The built-in desktop describes its session in ``session_env`` (``KEY=VALUE``
    lines: ``DISPLAY``, ``DBUS_SESSION_BUS_ADDRESS``, ``XDG_RUNTIME_DIR``...), so a
    terminal as that user reaches the screen and the session bus, as ``guest.user.run``
    does. ``TERM`` and ``SHELL`` stay the terminal's own.
    """
    found: dict[str, str] = {}
    try:
        with open(session_env, encoding="utf-8") as handle:
            for line in handle:
                key, sep, value = line.rstrip("\n").partition("=")
                if sep and key and key not in ("TERM", "SHELL"):
                    found[key] = value
    except (OSError, UnicodeDecodeError):
        return {}
    return found if found.get("USER") == user else {}


def user_environment(
    user: str | None,
    term: str,
    extra: dict[str, str] | None,
    session_env: str = SESSION_ENV,
) -> tuple[dict[str, str], dict[str, Any], str, str]:
    """The child's environment, Popen user kwargs, home and login shell for ``user``
    (with the desktop session's environment when ``user`` is the session's user).

    :raise TerminalError: no such user, or switching needs root.
    """
    import pwd  # deferred: not on Windows

    try:
        entry = pwd.getpwuid(os.geteuid()) if user is None else pwd.getpwnam(user)
    except KeyError:
        raise TerminalError(f"no such user {user!r}") from None
    switch: dict[str, Any] = {}
    if entry.pw_uid != os.geteuid():
        if os.geteuid() != 0:
            raise TerminalError(f"run_as_user={user!r} needs the agent to run as root")
        switch = {
            "user": entry.pw_uid,
            "group": entry.pw_gid,
            "extra_groups": os.getgrouplist(entry.pw_name, entry.pw_gid),
        }
    shell = entry.pw_shell if entry.pw_shell and os.path.exists(entry.pw_shell) else "/bin/sh"
    home = entry.pw_dir if os.path.isdir(entry.pw_dir) else "/"
    env = {
        "PATH": DEFAULT_PATH,
        "TERM": term,
        "HOME": home,
        "USER": entry.pw_name,
        "LOGNAME": entry.pw_name,
        "SHELL": shell,
        "LANG": os.environ.get("LANG", "C.UTF-8"),
    }
    if entry.pw_uid != 0 and os.path.isdir(f"/run/user/{entry.pw_uid}"):
        env["XDG_RUNTIME_DIR"] = f"/run/user/{entry.pw_uid}"
    env.update(session_environment(entry.pw_name, session_env))
    env.update(extra or {})
    return env, switch, home, shell


class Terminal:
    """One program on a pty and its two byte streams (see the module docstring)."""

    def __init__(
        self,
        terminal_id: int,
        send: SendBinary,
        proc: subprocess.Popen[bytes],
        master: int,
        window: int,
    ) -> None:
        self.terminal_id = terminal_id
        self.proc = proc
        self._send = send
        self._master = master
        self._window = window
        self._sent = 0
        self._acked = 0
        self._credit = asyncio.Event()
        self._received = 0  # input bytes taken from the host
        self._pending = bytearray()  # input not yet written to the pty
        self._writing = False
        self._closed_fd = False
        self._hangup: asyncio.TimerHandle | None = None
        self.ended: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._task = asyncio.get_running_loop().create_task(self._run())

    # -- output ---------------------------------------------------------------------

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            pump = loop.create_task(self._pump_output())
            exit_code = await self._wait_exit()
            # The program is gone: let the output it left be read, then stop.
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(pump), DRAIN_AFTER_EXIT)
            pump.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pump
            self._kill_group(signal.SIGHUP)
            code, sig = (None, -exit_code) if exit_code < 0 else (exit_code, None)
            payload = json.dumps({"exit_code": code, "signal": sig}).encode()
            with contextlib.suppress(Exception):
                await self._send(
                    encode_transfer_frame(
                        FrameKind.TERMINAL_EXIT, self.terminal_id, self._sent, payload
                    )
                )
        finally:
            self._close_fd()
            if self._hangup is not None:
                self._hangup.cancel()
            if not self.ended.done():
                self.ended.set_result(None)

    async def _wait_exit(self) -> int:
        while True:
            code = self.proc.poll()
            if code is not None:
                return code
            # Popen.wait would hold a worker thread for the terminal's whole life.
            await asyncio.sleep(0.05)

    async def _pump_output(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            while self._sent - self._acked >= self._window:
                self._credit.clear()
                await self._credit.wait()  # throttled: the pty fills, the program blocks
            await _ready(loop, self._master, loop.add_reader, loop.remove_reader)
            try:
                data = os.read(self._master, READ_SIZE)
            except BlockingIOError:
                continue
            except OSError as exc:
                if exc.errno == errno.EIO:  # every slave descriptor is closed
                    return
                raise
            if not data:
                return
            frame = encode_transfer_frame(
                FrameKind.TERMINAL_DATA, self.terminal_id, self._sent, data
            )
            self._sent += len(data)
            await self._send(frame)

    # -- from the host --------------------------------------------------------------

    async def receive(self, frame: TransferFrame) -> None:
        """Act on one message of this terminal from the host."""
        kind = frame.kind
        if kind is FrameKind.TERMINAL_DATA:
            await self._take_input(frame)
        elif kind is FrameKind.TERMINAL_ACK:
            if self._acked < frame.offset <= self._sent:
                self._acked = frame.offset
                self._credit.set()
        elif kind is FrameKind.TERMINAL_RESIZE:
            if len(frame.payload) != 4:
                raise ValueError("a resize message carries rows u16 and cols u16")
            rows, cols = struct.unpack(">HH", frame.payload)
            check_size(rows, cols)
            if not self._closed_fd:
                set_window_size(self._master, rows, cols)
        elif kind is FrameKind.TERMINAL_SIGNAL:
            if frame.offset not in ALLOWED_SIGNALS:
                raise ValueError(f"signal {frame.offset} is not one a terminal forwards")
            self._signal_foreground(int(frame.offset))
        elif kind is FrameKind.TERMINAL_CLOSE:
            self.hang_up()
        else:
            raise ValueError(f"a {kind.name} message is not for the guest")

    async def _take_input(self, frame: TransferFrame) -> None:
        if frame.offset != self._received:
            raise ValueError(f"input at offset {frame.offset}, expected {self._received}")
        if len(self._pending) + len(frame.payload) > MAX_PENDING_INPUT:
            raise ValueError(f"more than {MAX_PENDING_INPUT} bytes of input not yet taken")
        self._received += len(frame.payload)
        self._pending += frame.payload
        if not self._writing:
            self._writing = True
            asyncio.get_running_loop().create_task(self._write_input())

    async def _write_input(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self._pending and not self._closed_fd:
                try:
                    written = os.write(self._master, bytes(self._pending[:READ_SIZE]))
                except BlockingIOError:
                    await _ready(loop, self._master, loop.add_writer, loop.remove_writer)
                    continue
                except OSError:
                    self._pending.clear()
                    return
                del self._pending[:written]
                done = self._received - len(self._pending)
                await self._send(
                    encode_transfer_frame(FrameKind.TERMINAL_ACK, self.terminal_id, done)
                )
        finally:
            self._writing = False

    def _signal_foreground(self, sig: int) -> None:
        # Deferred: termios does not exist on Windows.
        import termios

        try:
            group = os.tcgetpgrp(self._master) if not self._closed_fd else self.proc.pid
        except (OSError, termios.error):
            group = self.proc.pid
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, sig)

    def _kill_group(self, sig: int) -> None:
        """``sig`` to every process of the terminal's session: a shell with job control
        puts background jobs in groups of their own, and a hang-up must reach them."""
        for pid in [self.proc.pid, *session_members(self.proc.pid)]:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, sig) if pid == self.proc.pid else os.kill(pid, sig)

    def hang_up(self) -> None:
        """Hang up: SIGHUP to the terminal's session, SIGKILL if it is still there later."""
        if self._hangup is not None or self.ended.done():
            return
        self._kill_group(signal.SIGHUP)
        self._kill_group(signal.SIGCONT)  # a stopped job must see its SIGHUP
        self._hangup = asyncio.get_running_loop().call_later(
            HANGUP_GRACE, self._kill_group, signal.SIGKILL
        )

    def _close_fd(self) -> None:
        if not self._closed_fd:
            self._closed_fd = True
            with contextlib.suppress(OSError):
                os.close(self._master)


def session_members(sid: int) -> list[int]:
    """The processes of session ``sid`` (Linux ``/proc``; elsewhere none are found)."""
    members = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        # After the command: state, ppid, pgrp, session.
        if len(fields) > 3 and fields[3] == str(sid).encode():
            members.append(int(name))
    return members


async def _ready(
    loop: asyncio.AbstractEventLoop,
    fd: int,
    add: Callable[..., None],
    remove: Callable[[int], bool],
) -> None:
    """Wait until ``fd`` is readable (``add_reader``) or writable (``add_writer``)."""
    ready: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    add(fd, wake)
    try:
        await ready
    finally:
        remove(fd)


class Terminals:
    """One session's terminals, attached to its :class:`Transfers` for their messages."""

    def __init__(self, send: SendBinary) -> None:
        self._send = send
        self._open: dict[int, Terminal] = {}
        self.closed = False

    @classmethod
    def of(cls, transfers: Transfers) -> Terminals:
        """The session's terminals (created and attached on first use)."""
        handler = transfers.handler(FrameKind.TERMINAL_DATA)
        if isinstance(handler, Terminals):
            return handler
        terminals = cls(transfers.send)
        transfers.attach(TERMINAL_KINDS, terminals)
        return terminals

    def open(
        self,
        terminal_id: int,
        argv: list[str],
        *,
        rows: int,
        cols: int,
        env: dict[str, str],
        cwd: str,
        switch: dict[str, Any],
        window: int,
    ) -> Terminal:
        """Start ``argv`` on a new pty as terminal ``terminal_id``.

        :raise TerminalError: bad id or size, too many terminals, or it cannot start.
        """
        if self.closed:
            raise TerminalError("the session is closing")
        if not 1 <= terminal_id <= 0xFFFFFFFF:
            raise TerminalError(f"terminal_id must be 1..{0xFFFFFFFF}, got {terminal_id}")
        if terminal_id in self._open:
            raise TerminalError(f"terminal {terminal_id} is already open")
        if len(self._open) >= MAX_TERMINALS:
            raise TerminalError(f"{MAX_TERMINALS} terminals are already open")
        if not 1024 <= window <= MAX_WINDOW:
            raise TerminalError(f"window must be 1024..{MAX_WINDOW} bytes, got {window}")
        if not argv:
            raise TerminalError("command must name a program")
        check_size(rows, cols)
        master, slave = os.openpty()
        try:
            set_window_size(master, rows, cols)
            os.set_blocking(master, False)
            proc = subprocess.Popen(
                [_shim_python(), "-I", "-S", "-c", _CTTY_SHIM, *argv],
                stdin=slave,
                stdout=slave,
                stderr=slave,
                env=env,
                cwd=cwd,
                start_new_session=True,
                close_fds=True,
                **switch,
            )
        except OSError as exc:
            os.close(master)
            raise TerminalError(f"cannot start {argv[0]}: {exc}") from None
        finally:
            os.close(slave)
        terminal = Terminal(terminal_id, self._send, proc, master, window)
        self._open[terminal_id] = terminal
        terminal.ended.add_done_callback(lambda _f: self._open.pop(terminal_id, None))
        return terminal

    async def receive(self, frame: TransferFrame) -> None:
        """Route a host message to its terminal; messages for a gone one are dropped
        (they cross its EXIT on the wire). A malformed one hangs that terminal up."""
        terminal = self._open.get(frame.transfer_id)
        if terminal is None:
            return
        try:
            await terminal.receive(frame)
        except (OSError, ValueError) as exc:
            log.warning("terminal %d: %s; hanging up", frame.transfer_id, exc)
            terminal.hang_up()

    async def close(self) -> None:
        """Hang up every terminal and wait (bounded) until they are gone."""
        self.closed = True
        terminals = list(self._open.values())
        for terminal in terminals:
            terminal.hang_up()
        if terminals:
            await asyncio.wait([t.ended for t in terminals], timeout=HANGUP_GRACE + 3)
