"""Killing a command's whole process tree, also the parts that left its group.

A call's commands start in a session of their own, so one ``killpg`` reaches the
group. A descendant that called ``setsid`` (a daemonising script, ``nohup setsid``)
left the group; it is still found by walking parent pids in ``/proc`` and by the
``ADARE_CALL_ID`` entry its environment inherited (:data:`CALL_MARKER`). Standard
library only, and no import of the tool plumbing: the tools and the server use it.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from typing import Any, Protocol, Union

CALL_MARKER = "ADARE_CALL_ID"
"""Environment variable carrying the call id into the commands a call starts, so
descendants that left the process tree (``setsid`` + parent exit) can still be found."""

CHILD_DEFAULT_SIGNALS = frozenset(
    sig for sig in signal.Signals if sig not in (signal.SIGKILL, signal.SIGSTOP)
) if sys.platform != "win32" else frozenset()  # fmt: skip
"""Signals a started program gets at their default action, as init or a login gives them:
Python ignores SIGPIPE and SIGXFSZ, and an agent started by ``nohup`` or in the
background of a script ignores SIGINT and SIGQUIT; exec keeps what is ignored, so a
program would inherit it (``yes | head -1`` then ends with "Broken pipe", ^C stops
nothing)."""

# Evaluated at run time: Union, since the guest's Python 3.9 has no ``X | Y`` of classes.
Process = Union[subprocess.Popen[Any], asyncio.subprocess.Process]


class ProcessTracker(Protocol):
    """Who answers for the processes a command starts (a call's context): it kills
    every tracked process tree when the call is cancelled or times out."""

    call_id: str
    """Put in the command's environment as :data:`CALL_MARKER`."""

    def track_process(self, proc: Process) -> None: ...

    def untrack_process(self, proc: Process) -> None: ...


def kill_process_tree(proc: Process, marker: str | None = None) -> None:
    """Kill ``proc``, its process group and every descendant; safe on an exited process.

    Start ``proc`` in a new session. A descendant that called ``setsid`` left the
    group, so the descendants are also found by walking parent pids in ``/proc``
    (collected *before* anything dies: an orphan is re-parented and lost to the
    walk) and, with ``marker``, by the ``ADARE_CALL_ID=<marker>`` entry of their
    environment (see :data:`CALL_MARKER`).
    """
    if sys.platform == "win32":
        if proc.returncode is None:
            _taskkill(proc)
        return
    strays = descendants(proc.pid) | (marked_processes(marker) if marker else set())
    if proc.returncode is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            try:
                proc.kill()
            except ProcessLookupError:
                pass
    for pid in strays - {os.getpid()}:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _taskkill(proc: Process) -> None:
    try:
        subprocess.run(
            ["taskkill", "/F", "/T", "/PID", str(proc.pid)],
            capture_output=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        pass
    try:
        proc.kill()
    except ProcessLookupError:
        pass


def _proc_files(name: str) -> Iterator[tuple[int, bytes]]:
    """(pid, content of ``/proc/<pid>/<name>``) of every process that can be read."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/{name}", "rb") as handle:
                yield int(entry), handle.read()
        except OSError:
            continue


def descendants(pid: int) -> set[int]:
    """Pids of every living descendant of ``pid`` (by parent-pid chains in ``/proc``)."""
    children: dict[int, list[int]] = {}
    for child, data in _proc_files("stat"):
        # The command name is in parentheses and may itself hold ") ": split at the last.
        fields = data[data.rfind(b")") + 2 :].split()
        if len(fields) > 1:
            children.setdefault(int(fields[1]), []).append(child)
    found: set[int] = set()
    stack = [pid]
    while stack:
        for child in children.get(stack.pop(), ()):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found


def marked_processes(marker: str) -> set[int]:
    """Pids whose environment holds ``ADARE_CALL_ID=<marker>``."""
    needle = f"{CALL_MARKER}={marker}".encode()
    return {pid for pid, data in _proc_files("environ") if needle in data.split(b"\0")}
