"""``FakeMachine``: a :class:`~pytest_adare.machine.base.MachineBackend` without a
hypervisor, for the tests of what drives a machine (the VM, the pool, the warm state).

It logs what it is asked (``machine1.start``, ``machine1.savevm tag``, …) into a shared
list, answers the console from :data:`CONSOLE`, dies when a test sets :attr:`died`,
and writes a stand-in stream file on :meth:`asave_state`. It is checked against the
protocol by ``mypy --strict`` (this module is in its ``files``) and by
``tests/unit/pytest_adare/machine/test_machine_protocol_compliance.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import re
import time
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from PIL import Image

from pytest_adare.errors import MigrationError, VMDied, VMTimeout
from pytest_adare.machine.base import Capability, MachineBackend, MachineImage
from pytest_adare.machine.results import (
    CAPTURE_MAX_BYTES,
    CAPTURE_SNAPLEN,
    DUMP_TIMEOUT,
    DiskExport,
    DiskFormat,
    DumpFormat,
    Flush,
    FreezeAgent,
    MemoryDump,
    NetworkCapture,
    new_file_target,
)
from pytest_adare.machine.spec import MachineSpec

T = TypeVar("T")
CONSOLE = ["[    1.2] adare-init: agent started", "Debian GNU/Linux 12 adare ttyS0"]
STATE_STREAM = b"QEVM" + b"\0" * 100


def png(color: str, size: tuple[int, int] = (64, 48)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, color).save(out, "PNG")
    return out.getvalue()


class FakeMachine:
    """See the module docstring; ``spec`` is what the factory was given."""

    backend = "fake"
    capabilities: frozenset[Capability] = frozenset(Capability)

    def __init__(
        self,
        image: MachineImage | None,
        workdir: Path,
        log: list[str] | None = None,
        number: int = 1,
        *,
        spec: MachineSpec | None = None,
        fail_state: bool = False,
    ) -> None:
        self.image = image
        self.workdir = workdir
        self.spec = spec or MachineSpec(name="fake")
        self.log = log if log is not None else []
        self.id = f"machine{number}"
        self.name = self.spec.name
        self.alive = False
        self.died: str | None = None
        self.fail_state = fail_state
        self.accel: str | None = "tcg"
        self.accel_reason: str | None = "accel: tcg (test)"
        self.agent_port: int | None = 40000 + number
        self.argv: list[str] = ["fake-hypervisor", self.id]
        self.console_log_path = workdir / f"console-{number}.log"
        self._overlay = workdir / f"overlay-{number}.qcow2"
        self.running_guest = True
        self.captures: list[NetworkCapture] = []

    def _record(self, what: str) -> None:
        self.log.append(f"{self.id}.{what}")

    @property
    def agent_serial_path(self) -> Path:
        return self.workdir / f"no-agent-serial-{self.id[-1]}.sock"

    @property
    def qga_path(self) -> Path:
        return self.workdir / f"qga-{self.id[-1]}.sock"

    @property
    def qmp_path(self) -> None:
        return None

    @property
    def overlay_path(self) -> Path:
        return self._overlay

    @overlay_path.setter
    def overlay_path(self, path: Path) -> None:
        self._overlay = path

    # -- lifecycle
    def start(self) -> FakeMachine:
        self._record("start")
        self.alive = True
        return self

    def shutdown(self, timeout: float = 10.0) -> None:
        self._record("shutdown")
        self.alive = False

    def kill(self) -> None:
        self.shutdown()

    def is_running(self) -> bool:
        return self.alive and self.died is None

    def check_alive(self) -> None:
        if not self.is_running():
            raise VMDied(self.died or f"{self.id} was shut down", self.console_tail())

    async def bounded(self, coro: Awaitable[T], timeout: float, what: str) -> T:
        try:
            return await asyncio.wait_for(coro, timeout)
        except asyncio.TimeoutError:
            raise VMTimeout(what, timeout, self.console_tail()) from None

    @contextlib.asynccontextmanager
    async def _paused(self, resume: bool) -> AsyncIterator[float]:
        was_running, self.running_guest = self.running_guest, False
        self._record("pause")
        try:
            yield time.time()
        finally:
            if was_running and resume:
                self.running_guest = True
                self._record("resume")

    def paused(self, *, resume: bool = True) -> contextlib.AbstractAsyncContextManager[float]:
        return self._paused(resume)

    async def aresume(self) -> None:
        self._record("resume")
        self.running_guest = True

    async def areset(self, timeout: float = 60.0) -> None:
        self._record("reset")

    # -- console
    def console_tail(self, n: int = 40) -> list[str]:
        return CONSOLE[-n:]

    def console_mark(self) -> int:
        return len(CONSOLE)

    async def aseed_console(self, text: str) -> None:
        self._record("seed_console")

    async def await_for_console(
        self, pattern: str | re.Pattern[str], timeout: float, since: int = 0
    ) -> re.Match[str]:
        regex = pattern if isinstance(pattern, re.Pattern) else re.compile(pattern)
        self._record(f"await_for_console {regex.pattern}")
        for line in CONSOLE[since:]:
            if match := regex.search(line):
                return match
        raise VMTimeout(f"console output matching {regex.pattern!r}", timeout, CONSOLE)

    def console_write(self, data: bytes | str) -> None:
        self._record(f"console_write {len(data)}")

    # -- screen and input
    async def ascreendump(self, timeout: float = 30.0) -> Image.Image:
        return Image.open(io.BytesIO(await self.ascreendump_png(timeout)))

    async def ascreendump_png(self, timeout: float = 30.0) -> bytes:
        self._record("screendump")
        return png("blue")

    async def asend_input(self, events: list[dict[str, Any]]) -> None:
        self._record(f"input {len(events)}")

    async def atype_text(self, text: str, key_interval: float | None = None) -> None:
        self._record(f"type {text}")

    # -- snapshots and whole states
    async def asavevm(self, tag: str, timeout: float = 120.0) -> None:
        self._record(f"savevm {tag}")

    async def aloadvm(self, tag: str, timeout: float = 120.0) -> None:
        self._record(f"loadvm {tag}")

    async def asave_state(self, path: Path, timeout: float = 120.0) -> int:
        self._record("save_state")
        self.running_guest = False
        if self.fail_state:
            raise MigrationError(f"the state of {self.name} written to {path}: disk full")
        await asyncio.to_thread(path.write_bytes, STATE_STREAM)
        return len(STATE_STREAM)

    async def aload_state(self, path: Path, timeout: float = 120.0) -> None:
        self._record("load_state")
        if not await asyncio.to_thread(path.is_file):
            raise MigrationError(f"no saved state at {path}")

    # -- evidence and network
    async def adump_memory(
        self, path: str | Path, format: DumpFormat = "elf", *, resume: bool = True,
        timeout: float = DUMP_TIMEOUT,
    ) -> MemoryDump:  # fmt: skip
        target = new_file_target(path)
        target.write_bytes(b"\x7fELF" + b"\0" * 60)
        self._record(f"dump_memory {format}")
        return MemoryDump(target, format, 64, 0.0)

    @contextlib.asynccontextmanager
    async def _capture(
        self, path: str | Path, snaplen: int, max_bytes: int
    ) -> AsyncIterator[NetworkCapture]:
        target = new_file_target(path)
        target.write_bytes(b"\xd4\xc3\xb2\xa1" + b"\0" * 20)
        capture = NetworkCapture(target, "fake-0", "net0", snaplen, max_bytes, time.time())
        self.captures.append(capture)
        try:
            yield capture
        finally:
            capture.stopped_at = time.time()
            self.captures.remove(capture)

    def network_capture(
        self, path: str | Path, *, snaplen: int = CAPTURE_SNAPLEN,
        max_bytes: int = CAPTURE_MAX_BYTES, nic: str | None = None,
    ) -> contextlib.AbstractAsyncContextManager[NetworkCapture]:  # fmt: skip
        return self._capture(path, snaplen, max_bytes)

    def active_captures(self) -> list[NetworkCapture]:
        return list(self.captures)

    async def aexport_disk(
        self, path: str | Path, format: DiskFormat = "raw", *,
        qga: FreezeAgent | None = None, flush: Flush | None = None,
    ) -> DiskExport:  # fmt: skip
        target = new_file_target(path)
        target.write_bytes(b"\0" * 512)
        self._record(f"export_disk {format}")
        return DiskExport(target, format, 512, 0.0, "not quiesced (fake)")

    async def aset_link(self, up: bool, *, nic: str | None = None) -> None:
        self._record(f"set_link {'up' if up else 'down'}")

    async def ahypervisor_version(self) -> str:
        return "0.0.0 (fake)"

    def keep_hint(self, sockets: Path, loadvm: str | None) -> str:
        return f"fake-hypervisor --disk {self.overlay_path}" + (
            f" --load {loadvm}" if loadvm else ""
        )


if TYPE_CHECKING:  # mypy --strict checks the fake against the protocol here
    _checked: MachineBackend = FakeMachine(None, Path("."))
