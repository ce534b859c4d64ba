"""Cheaper child-exit watching for asyncio subprocesses on Python 3.8 to 3.11 (Linux).

Before 3.12 asyncio learns that a child exited from a new thread per child blocked in
``waitpid`` (``ThreadedChildWatcher``). In a guest without KVM starting that thread
costs about 10 ms of a 50 ms ``execute_shell("true")``. A pidfd (Linux ≥ 5.3) watched
by the event loop needs no thread; 3.12+ does that by itself.

Call :func:`watch_children_with_pidfd` on the event loop before starting a subprocess;
it is a no-op where it does not apply. Children started from any other loop or thread
keep the thread-per-child watcher, because a pidfd watcher serves one loop only.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import TypeVarTuple, Unpack

    Ts = TypeVarTuple("Ts")

NEEDED = sys.version_info < (3, 12) and sys.platform == "linux" and hasattr(os, "pidfd_open")
"""Whether this interpreter watches children from a thread per child by default."""


def watch_children_with_pidfd() -> None:
    """Let the running loop watch its children's exits through pidfds (idempotent)."""
    if not NEEDED:
        return
    loop = asyncio.get_running_loop()
    current = asyncio.get_child_watcher()
    if isinstance(current, _LoopPidfdWatcher) and current.loop is loop:
        return
    try:
        os.close(os.pidfd_open(os.getpid()))
    except OSError:  # kernel before 5.3, or a seccomp filter: keep the default
        return
    asyncio.set_child_watcher(_LoopPidfdWatcher(loop))


if NEEDED:

    class _LoopPidfdWatcher(asyncio.PidfdChildWatcher):
        """Pidfds for children of its own loop; a thread per child for the others."""

        def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
            super().__init__()
            self.loop = loop
            self.attach_loop(loop)
            self._others = asyncio.ThreadedChildWatcher()

        def is_active(self) -> bool:
            return True  # the thread watcher serves whatever loop ours does not

        def add_child_handler(
            self, pid: int, callback: Callable[[int, int, Unpack[Ts]], object], *args: Unpack[Ts]
        ) -> None:
            if _running_loop() is self.loop and not self.loop.is_closed():
                super().add_child_handler(pid, callback, *args)
            else:
                self._others.add_child_handler(pid, callback, *args)

        def remove_child_handler(self, pid: int) -> bool:
            return super().remove_child_handler(pid) or self._others.remove_child_handler(pid)

        def close(self) -> None:
            super().close()
            self._others.close()

else:  # pragma: no cover - the name exists for isinstance() checks only

    class _LoopPidfdWatcher:  # type: ignore[no-redef]
        loop: asyncio.AbstractEventLoop


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
