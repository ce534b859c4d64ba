"""Start child processes (QEMU) that cannot outlive this Python process, even on SIGKILL.

Each child asks the kernel, between fork and exec, for ``PR_SET_PDEATHSIG``: when its
parent goes, it is sent SIGKILL. The kernel ties that signal to the parent *thread*
that forked the child, not to the process, so children are forked by one spawner
thread that lives as long as the process; a child started from a short-lived worker
thread would otherwise be killed when that worker ends.

Example::

    proc = spawn(["qemu-system-x86_64", ...], stdout=subprocess.PIPE)
"""

from __future__ import annotations

import ctypes
import os
import queue
import signal
import subprocess
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any, cast

_PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True)
_prctl = _libc.prctl
_prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
_prctl.restype = ctypes.c_int


def _die_with_parent(parent_pid: int) -> Callable[[], None]:
    def preexec() -> None:
        if _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            os._exit(127)
        # The parent may have died between fork and prctl: then nobody would signal us.
        if os.getppid() != parent_pid:
            os._exit(127)

    return preexec


_Request = tuple[Sequence[str], dict[str, Any], "Future[subprocess.Popen[bytes]]"]


class _Spawner:
    """The one thread that forks every reaped child; it lives until the process exits."""

    def __init__(self) -> None:
        self._requests: queue.SimpleQueue[_Request] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name="adare-spawner", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            argv, kwargs, future = self._requests.get()
            if not future.set_running_or_notify_cancel():
                continue
            try:
                proc = cast(
                    "subprocess.Popen[bytes]",
                    subprocess.Popen(argv, preexec_fn=_die_with_parent(os.getpid()), **kwargs),
                )
            except BaseException as exc:
                future.set_exception(exc)
            else:
                future.set_result(proc)

    def spawn(self, argv: Sequence[str], kwargs: dict[str, Any]) -> subprocess.Popen[bytes]:
        future: Future[subprocess.Popen[bytes]] = Future()
        self._requests.put((list(argv), kwargs, future))
        return future.result(timeout=30)


_spawner: _Spawner | None = None
_spawner_lock = threading.Lock()


def spawn(argv: Sequence[str], **popen_kwargs: Any) -> subprocess.Popen[bytes]:
    """Start ``argv`` like :class:`subprocess.Popen` (bytes I/O), killed when we die.

    The child gets its own session (Ctrl-C in a terminal reaches pytest, which then
    shuts the child down in order) and SIGKILL as its parent-death signal.

    :raise OSError: when the program cannot be executed (as Popen).
    :raise ValueError: for ``preexec_fn`` or ``text`` mode, which this function owns.
    """
    for owned in ("preexec_fn", "text", "universal_newlines", "encoding", "errors"):
        if owned in popen_kwargs:
            raise ValueError(f"spawn() does not accept {owned!r}")
    popen_kwargs.setdefault("start_new_session", True)
    global _spawner
    with _spawner_lock:
        if _spawner is None:
            _spawner = _Spawner()
        spawner = _spawner
    return spawner.spawn(argv, popen_kwargs)
