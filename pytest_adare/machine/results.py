"""What a machine's evidence methods return, and the file rules they share.

Plain data, the same for every backend: a :class:`MemoryDump`, a :class:`DiskExport`,
a :class:`NetworkCapture`. Every target is a new file in an existing directory
(:func:`new_file_target`): evidence never overwrites what is already there.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, get_args

from pytest_adare.errors import InfrastructureError

DumpFormat = Literal["elf", "kdump-zlib", "kdump-lzo", "kdump-snappy", "win-dmp"]
DUMP_FORMATS: tuple[DumpFormat, ...] = get_args(DumpFormat)
DUMP_TIMEOUT = 600.0
DiskFormat = Literal["raw", "qcow2"]
DISK_FORMATS: tuple[DiskFormat, ...] = get_args(DiskFormat)
CAPTURE_SNAPLEN = 65535
CAPTURE_MAX_BYTES = 1024**3


@dataclass(frozen=True)
class MemoryDump:
    """A finished dump: where, which format, its size and how long it took."""

    path: Path
    format: str
    size: int
    seconds: float


class MemoryDumpFailed(InfrastructureError, RuntimeError):
    """The hypervisor reported the dump as failed (the message holds its answer)."""


@dataclass(frozen=True)
class DiskExport:
    """A finished export: the file, its format and size, how the guest was quiesced."""

    path: Path
    format: str
    size: int
    seconds: float
    quiesced: str


@dataclass
class NetworkCapture:
    """One running (or finished) capture: the pcap file and how it went."""

    path: Path
    filter_id: str
    netdev: str
    snaplen: int
    max_bytes: int
    started_at: float
    stopped_at: float | None = None
    truncated: bool = False
    """True when the watcher stopped the capture at ``max_bytes``."""
    _watcher: asyncio.Task[None] | None = field(default=None, repr=False)

    @property
    def active(self) -> bool:
        """True while the hypervisor still writes to :attr:`path`."""
        return self.stopped_at is None


class FreezeAgent(Protocol):
    """qemu-ga as :class:`~pytest_adare.machine_tools.qga.AsyncQGAClient` offers it."""

    async def execute(
        self, command: str, arguments: dict[str, Any] | None = None, timeout: float = 30.0
    ) -> Any: ...


Flush = Callable[[], Awaitable[None]]
"""Flushes the guest's caches when qemu-ga cannot freeze (the VM runs ``sync``)."""


def new_file_target(path: str | Path) -> Path:
    """The checked absolute target: a new file in an existing directory.

    :raise FileExistsError, FileNotFoundError: it exists, or its directory does not.
    """
    target = Path(path).resolve()
    if target.exists():
        raise FileExistsError(f"{target} exists; a dump never overwrites a file")
    if not target.parent.is_dir():
        raise FileNotFoundError(f"directory {target.parent} does not exist")
    return target


def discard_file(path: Path) -> None:
    """Remove ``path`` when it is there."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
