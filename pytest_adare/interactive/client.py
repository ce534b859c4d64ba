"""The client's side of an owner socket: a shell on the user's terminal, a screenshot, stop.

:func:`shell` bridges the host's terminal to the guest's: raw mode on the host tty (so
Ctrl-C, Ctrl-D and arrows go to the guest program, not to ``adare-vm``), window-size
changes forwarded on SIGWINCH, the host terminal restored however it ends. Without a
tty (a script, a pipe) the bytes are copied as they are and a command's output comes
without the pty's ``\\r\\n`` (``stty -onlcr``), so ``adare-vm shell NAME -- CMD`` scripts.

A command runs as :func:`command_argv` says: in a login shell's environment (``sh -l``:
the ``PATH`` of the interactive shell, ``/adare/bin`` included on the built-in images),
one argument as a shell command line (``-- 'ls; cat /etc/hostname'``), several as a
program and its arguments, untouched.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import struct
import sys
import termios
import tty
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pytest_adare.interactive.wire import Kind, encode, encode_json, parse_json, read_frame

PLAIN_OUTPUT = "stty -echo -onlcr 2>/dev/null; "
"""Before a scripted command: the pty's echo and newline translation off."""
RUN_PROGRAM = 'exec "$@"'
RUN_COMMAND_LINE = 'eval "$1"'


def command_argv(command: Sequence[str], *, plain: bool) -> list[str]:
    """What the guest runs for ``adare-vm shell NAME -- COMMAND...``.

    A login shell (``sh -l`` reads ``/etc/profile``, as the interactive shell does) runs
    the one argument as a command line, or ``exec``s several as they are; ``plain``
    (no tty on our side) turns the pty's echo and ``\\r\\n`` off first.

    >>> command_argv(["ls; cat /etc/hostname"], plain=False)
    ['sh', '-lc', 'eval "$1"', 'sh', 'ls; cat /etc/hostname']
    >>> command_argv(["cat", "/etc/host name"], plain=True)[2:]
    ['stty -echo -onlcr 2>/dev/null; exec "$@"', 'sh', 'cat', '/etc/host name']
    """
    script = RUN_COMMAND_LINE if len(command) == 1 else RUN_PROGRAM
    return ["sh", "-lc", (PLAIN_OUTPUT if plain else "") + script, "sh", *command]


class OwnerError(RuntimeError):
    """The owner refused or failed the request (its message)."""


async def _open(
    socket: Path, request: dict[str, Any]
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    try:
        reader, writer = await asyncio.open_unix_connection(str(socket))
    except OSError as exc:
        raise OwnerError(f"cannot reach the VM's owner at {socket}: {exc.strerror}") from None
    writer.write(encode_json(Kind.REQUEST, request))
    await writer.drain()
    return reader, writer


async def request(socket: Path, op: str) -> tuple[Kind, bytes]:
    """Send one simple request (``ping``, ``screen``, ``stop``); the answer frame.

    :raise OwnerError: the owner answered with an error or not at all.
    """
    reader, writer = await _open(socket, {"op": op})
    try:
        frame = await asyncio.wait_for(read_frame(reader), 60)
    finally:
        writer.close()
    if frame is None:
        raise OwnerError("the VM's owner closed the connection without an answer")
    if frame[0] is Kind.ERROR:
        raise OwnerError(frame[1].decode(errors="replace"))
    return frame


def _window_size(fd: int) -> tuple[int, int]:
    size = shutil.get_terminal_size((80, 24)) if not os.isatty(fd) else os.get_terminal_size(fd)
    # A new pty says 0x0 until someone sets it: give the guest a usable size.
    return size.lines or 24, size.columns or 80


async def shell(
    socket: Path,
    command: Sequence[str] | None = None,
    *,
    user: str | None = None,
    stdin: int = 0,
    stdout: int = 1,
) -> int:
    """A terminal in the VM on ``stdin``/``stdout``; its exit status (128+N: signal N).

    :raise OwnerError: the owner refused (no such user, the agent is gone).
    """
    interactive = os.isatty(stdin)
    argv = command_argv(command, plain=not interactive) if command else None
    rows, cols = _window_size(stdin)
    reader, writer = await _open(
        socket,
        {
            "op": "shell",
            "command": argv,
            "user": user,
            "rows": rows,
            "cols": cols,
            "term": os.environ.get("TERM", "xterm") if interactive else "dumb",
        },
    )
    loop = asyncio.get_running_loop()
    saved = termios.tcgetattr(stdin) if interactive else None
    input_done = asyncio.Event()

    def on_input() -> None:
        try:
            data = os.read(stdin, 65536)
        except OSError:
            data = b""
        if not data:
            loop.remove_reader(stdin)
            input_done.set()
            if not interactive:  # end of input: Ctrl-D to the program's pty
                writer.write(encode(Kind.DATA, b"\x04"))
            return
        writer.write(encode(Kind.DATA, data))

    def on_resize() -> None:
        writer.write(encode(Kind.RESIZE, struct.pack(">HH", *_window_size(stdin))))

    try:
        if saved is not None:
            tty.setraw(stdin)
            loop.add_signal_handler(signal.SIGWINCH, on_resize)
        with contextlib.suppress(OSError):  # a regular file or /dev/null: no input
            loop.add_reader(stdin, on_input)
        while (frame := await read_frame(reader)) is not None:
            kind, payload = frame
            if kind is Kind.DATA:
                _write_all(stdout, payload)
            elif kind is Kind.EXIT:
                status = parse_json(payload)
                if isinstance(status.get("signal"), int):
                    return 128 + int(status["signal"])
                code = status.get("exit_code")
                return code if isinstance(code, int) else 1
            elif kind is Kind.ERROR:
                raise OwnerError(payload.decode(errors="replace"))
        raise OwnerError("the VM's owner went away (the VM stopped?)")
    finally:
        with contextlib.suppress(Exception):
            loop.remove_reader(stdin)
        if saved is not None:
            loop.remove_signal_handler(signal.SIGWINCH)
            termios.tcsetattr(stdin, termios.TCSADRAIN, saved)
        writer.close()


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view) :]
        except BlockingIOError:
            continue


def print_json(value: Any) -> None:
    """One JSON document on stdout (``adare-vm list --json``)."""
    json.dump(value, sys.stdout, indent=2)
    sys.stdout.write("\n")
