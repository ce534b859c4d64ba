"""Network capture of the guest's netdev as pcap, through a QMP ``filter-dump`` object.

QEMU writes every frame that passes the netdev (both directions, ``queue=all``) to the
file, unbuffered, in classic pcap format (Wireshark, tcpdump, dpkt read it). The
filter is added with ``object-add`` and removed with ``object-del``; QEMU closes the
file then. The guest decides how much traffic there is, so the host bounds it: each
frame is cut at ``snaplen`` bytes, and a watcher removes the filter once the file
passes ``max_bytes`` (``capture.truncated`` says so).

Example::

    async with machine.network_capture(tmp_path / "net.pcap") as capture:
        ...                                      # guest traffic lands in the file
    assert capture.path.stat().st_size > 24      # the pcap header is 24 bytes
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Protocol

from pytest_adare.machine.base import NETDEV_ID
from pytest_adare.machine.results import (
    CAPTURE_MAX_BYTES,
    CAPTURE_SNAPLEN,
    NetworkCapture,
    new_file_target,
)

DEFAULT_SNAPLEN = CAPTURE_SNAPLEN
DEFAULT_MAX_BYTES = CAPTURE_MAX_BYTES
WATCH_INTERVAL = 1.0
"""Seconds between two looks at the capture file's size (the ``max_bytes`` bound)."""
QMP_TIMEOUT = 30.0

_ids = itertools.count()


class CaptureMachine(Protocol):
    """What a capture needs of a :class:`~pytest_adare.qemu.machine.Machine`."""

    async def aqmp(self, cmd: str, timeout: float = 60.0, **args: Any) -> Any: ...
    def is_running(self) -> bool: ...


_ACTIVE: weakref.WeakKeyDictionary[Any, list[NetworkCapture]] = weakref.WeakKeyDictionary()


def active_captures(machine: CaptureMachine) -> list[NetworkCapture]:
    """The captures currently writing on ``machine`` (oldest first)."""
    return [c for c in _ACTIVE.get(machine, []) if c.active]


async def start_capture(
    machine: CaptureMachine,
    path: str | Path,
    *,
    netdev: str = NETDEV_ID,
    snaplen: int = DEFAULT_SNAPLEN,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> NetworkCapture:
    """Start writing ``netdev``'s traffic to ``path`` (a new file; its directory must exist).

    :raise FileExistsError: ``path`` exists (a capture never overwrites a file), or
        FileNotFoundError: its directory does not.
    :raise ValueError: ``snaplen`` or ``max_bytes`` out of range.
    :raise MachineCommandError: QEMU refused the filter (e.g. no such netdev).
    """
    if not 64 <= snaplen <= 262144 or max_bytes < 24:
        raise ValueError(
            f"snaplen must be 64..262144 and max_bytes >= 24, got {snaplen}, {max_bytes}"
        )
    target = new_file_target(path)
    capture = NetworkCapture(
        target, f"adare-capture-{next(_ids)}", netdev, snaplen, max_bytes, time.time()
    )
    await machine.aqmp(
        "object-add", QMP_TIMEOUT,
        **{"qom-type": "filter-dump", "id": capture.filter_id, "netdev": netdev,
           "file": str(target), "maxlen": snaplen, "queue": "all"},
    )  # fmt: skip
    _ACTIVE.setdefault(machine, []).append(capture)
    capture._watcher = asyncio.ensure_future(_watch_size(machine, capture))
    return capture


async def stop_capture(machine: CaptureMachine, capture: NetworkCapture) -> None:
    """Remove the filter (QEMU closes the file); safe to call twice or on a dead machine."""
    if capture._watcher is not None and capture._watcher is not asyncio.current_task():
        capture._watcher.cancel()
    if capture.stopped_at is not None:
        return
    capture.stopped_at = time.time()
    with contextlib.suppress(ValueError):
        _ACTIVE.get(machine, []).remove(capture)
    if machine.is_running():
        await machine.aqmp("object-del", QMP_TIMEOUT, id=capture.filter_id)


async def _watch_size(machine: CaptureMachine, capture: NetworkCapture) -> None:
    while capture.active:
        await asyncio.sleep(WATCH_INTERVAL)
        with contextlib.suppress(OSError):
            if capture.path.stat().st_size >= capture.max_bytes:
                capture.truncated = True
                with contextlib.suppress(Exception):
                    await stop_capture(machine, capture)
                return


@asynccontextmanager
async def network_capture(
    machine: CaptureMachine,
    path: str | Path,
    *,
    netdev: str = NETDEV_ID,
    snaplen: int = DEFAULT_SNAPLEN,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> AsyncIterator[NetworkCapture]:
    """:func:`start_capture` for the block, :func:`stop_capture` after it (also on error)."""
    capture = await start_capture(
        machine, path, netdev=netdev, snaplen=snaplen, max_bytes=max_bytes
    )
    try:
        yield capture
    finally:
        await stop_capture(machine, capture)
