"""The machine contract: what the VM, the pool and the plugin may ask of any backend.

A backend is one package (``pytest_adare.qemu``, ``pytest_adare.libvirt_backend``) whose
machine class satisfies :class:`MachineBackend`. The VM never looks at which class it
got: it asks :attr:`MachineBackend.capabilities` (``Capability.MIGRATION in
machine.capabilities``) and a backend that lacks a feature raises
:class:`UnsupportedFeature` from the method, with the one message format
:func:`unsupported` makes. Hypervisor commands (QMP, libvirt's API) stay inside the
backend; when the hypervisor refuses one the backend raises :class:`MachineCommandError`,
whatever its own client raised.

The contract is async (the host's core runs on :func:`~pytest_adare.loop_thread.shared_loop`)
but for the lifecycle (``start``, ``shutdown``, ``kill``: sync, as the pool and fixtures
use them; async code calls them through ``asyncio.to_thread``) and the calls that never
wait (the console's tail and mark, a write to it, the running state, the keep hint).
The lifecycle stays sync on purpose: a start does blocking work (``qemu-img``, the
accelerator probe's boot, a share's virtiofsd) under the machine's thread lock, and
``kill`` must work from a finalizer, an ``atexit`` hook or a signal handler, when the
shared loop may be stopped or be the very thread that hangs. The sync face a script or
test uses (``screendump``, ``savevm``, ``wait_for_console``, …) is no part of it: every
backend gets it from
:class:`~pytest_adare.machine.core.MachineCore`, one ``sync_twin`` line per method.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Awaitable, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

from pytest_adare.errors import InfrastructureError
from pytest_adare.machine.results import (
    DiskExport,
    DiskFormat,
    DumpFormat,
    Flush,
    FreezeAgent,
    MemoryDump,
    NetworkCapture,
)
from pytest_adare.machine.spec import MachineSpec

if TYPE_CHECKING:  # PIL is imported by the backends, on first use
    from PIL import Image

T = TypeVar("T")


NETDEV_ID = "net0"
"""The netdev id of the guest's first NIC, the user-mode one that reaches the host:
what ``nic=None`` means to :meth:`MachineBackend.aset_link` and a network capture, and
the NIC forwarded ports are made on (``filter-dump`` and ``hostfwd_add`` name it)."""


class Capability(enum.Enum):
    """A feature a backend may or may not have; its value names it in messages."""

    SCREENDUMP = "a screendump"
    INPUT = "host-side keyboard and pointer input"
    SNAPSHOT = "internal snapshots (savevm/loadvm)"
    MIGRATION = "saving and loading the whole VM state (warm start)"
    MEMORY_DUMP = "a memory dump"
    NETWORK_CAPTURE = "a network capture (pcap)"
    DISK_EXPORT = "exporting the disk"
    LINK = "setting the network link up or down"
    RESET = "a hard reset while the hypervisor runs"
    KEEP = "keeping the disk after the run (--adare-keep)"
    PORT_FORWARD = "forwarded guest ports"
    SHARE = "a shared folder"


class UnsupportedFeature(InfrastructureError):
    """The machine's backend cannot do what was asked (see :func:`unsupported`)."""

    def __init__(self, backend: str, feature: str) -> None:
        super().__init__(f"{feature}: not supported on the {backend} backend")
        self.backend = backend
        self.feature = feature


class MachineCommandError(InfrastructureError):
    """The hypervisor refused a command (QMP's error answer, a libvirt error): ``command``
    is what was sent, ``reply`` what came back."""

    def __init__(self, message: str, *, command: str, reply: Any = None) -> None:
        super().__init__(message)
        self.command = command
        self.reply = reply


def unsupported(backend: str, feature: Capability | str) -> UnsupportedFeature:
    """The one error for a missing feature: ``<feature>: not supported on the <backend>
    backend``."""
    return UnsupportedFeature(
        backend, feature.value if isinstance(feature, Capability) else feature
    )


def require(machine: MachineBackend, capability: Capability) -> None:
    """:raise UnsupportedFeature: when ``machine`` lacks ``capability``."""
    if capability not in machine.capabilities:
        raise unsupported(machine.backend, capability)


class MachineImage(Protocol):
    """What a machine needs from an image (``ImageManifest`` provides it)."""

    @property
    def disk(self) -> Path | str | None: ...
    @property
    def format(self) -> str: ...
    @property
    def kernel(self) -> Path | str | None: ...
    @property
    def initrd(self) -> Path | str | None: ...
    @property
    def append(self) -> str | None: ...
    @property
    def desktop(self) -> bool: ...
    @property
    def memory_mib(self) -> int | None: ...


@runtime_checkable
class MachineBackend(Protocol):
    """One guest on one hypervisor, with an explicit lifecycle and bounded waits.

    Every wait ends at once with :class:`~pytest_adare.errors.VMDied` when the guest
    dies, and with :class:`~pytest_adare.errors.VMTimeout` naming what was awaited.
    """

    backend: str
    """The backend's name in messages: ``qemu``, ``libvirt``."""
    name: str
    workdir: Path
    accel: str | None
    accel_reason: str | None
    agent_port: int | None
    """The host port forwarded to the agent's WebSocket port, when networked."""
    argv: list[str]
    """How the hypervisor was started (QEMU's command line; libvirt: URI and domain)."""
    console_log_path: Path

    @property
    def capabilities(self) -> frozenset[Capability]: ...
    @property
    def agent_serial_path(self) -> Path: ...
    @property
    def qga_path(self) -> Path: ...
    @property
    def qmp_path(self) -> Path | None:
        """The hypervisor's QMP socket a person may connect to directly (kept in the
        ``adare-vm`` entry); None when the hypervisor keeps it to itself (libvirt)."""

    @property
    def overlay_path(self) -> Path: ...

    # -- lifecycle
    def start(self) -> MachineBackend: ...
    def shutdown(self, timeout: float = 10.0) -> None: ...
    def kill(self) -> None: ...
    def is_running(self) -> bool: ...
    def check_alive(self) -> None: ...
    async def bounded(self, coro: Awaitable[T], timeout: float, what: str) -> T: ...
    def paused(self, *, resume: bool = True) -> AbstractAsyncContextManager[float]: ...
    async def aresume(self) -> None: ...
    async def areset(self, timeout: float = 60.0) -> None: ...

    # -- console
    def console_tail(self, n: int = 40) -> list[str]: ...
    def console_mark(self) -> int: ...
    async def aseed_console(self, text: str) -> None: ...
    async def await_for_console(
        self, pattern: str | re.Pattern[str], timeout: float, since: int = 0
    ) -> re.Match[str]: ...
    def console_write(self, data: bytes | str) -> None: ...

    # -- screen and input
    async def ascreendump(self, timeout: float = 30.0) -> Image.Image: ...
    async def ascreendump_png(self, timeout: float = 30.0) -> bytes: ...
    async def asend_input(self, events: list[dict[str, Any]]) -> None: ...
    async def atype_text(self, text: str, key_interval: float = ...) -> None: ...

    # -- snapshots and whole states
    async def asavevm(self, tag: str, timeout: float = 120.0) -> None: ...
    async def aloadvm(self, tag: str, timeout: float = 120.0) -> None: ...
    async def asave_state(self, path: Path, timeout: float = 120.0) -> int: ...
    async def aload_state(self, path: Path, timeout: float = 120.0) -> None: ...

    # -- evidence and network
    async def adump_memory(
        self, path: str | Path, format: DumpFormat = "elf", *, resume: bool = True,
        timeout: float = ...,
    ) -> MemoryDump: ...  # fmt: skip
    def network_capture(
        self, path: str | Path, *, snaplen: int = ..., max_bytes: int = ...,
        nic: str | None = None,
    ) -> AbstractAsyncContextManager[NetworkCapture]: ...  # fmt: skip
    def active_captures(self) -> list[NetworkCapture]: ...
    async def aexport_disk(
        self, path: str | Path, format: DiskFormat = "raw", *,
        qga: FreezeAgent | None = None, flush: Flush | None = None,
    ) -> DiskExport: ...  # fmt: skip
    async def aset_link(self, up: bool, *, nic: str | None = None) -> None:
        """``nic``: a NIC's netdev id (``net0``, a LAN's ``lan0``); None: the first NIC."""

    async def ahypervisor_version(self) -> str: ...

    # -- after the run
    def keep_hint(self, sockets: Path, loadvm: str | None) -> str: ...


class MachineFactory(Protocol):
    """Makes a VM's (not yet started) machine from an image, a workdir and the one
    :class:`~pytest_adare.machine.spec.MachineSpec`: a backend's machine class, or the
    factory its registry entry makes (:mod:`pytest_adare.machine.registry`)."""

    def __call__(
        self, manifest: MachineImage, workdir: Path, spec: MachineSpec
    ) -> MachineBackend: ...


PROTOCOL_METHODS: Sequence[str] = tuple(
    name for name in MachineBackend.__dict__
    if not name.startswith("_") and callable(getattr(MachineBackend, name))
)  # fmt: skip
"""The methods every backend defines (the compliance test checks each signature)."""
