"""One QEMU process with an explicit lifecycle: prepare, launch, post-launch, shutdown, cleanup.

All asynchronous work (QMP, console capture, death watch) lives on the shared loop
(:func:`pytest_adare.loop_thread.shared_loop`); each sync method runs its ``a*`` twin
there. Every wait is bounded and ends at once with :class:`VMDied` when QEMU exits or
the guest shuts down, panics or stops on its own.

Example::

    with Machine(manifest, tmp_path / "vm") as vm:
        vm.wait_for_console(r"login:", timeout=60)
        print(vm.agent_port, vm.accel_reason)
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import re
import shlex
import shutil
import subprocess
import threading
import weakref
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from qemu.qmp import EventListener, ExecuteError, QMPClient, QMPError

from pytest_adare.errors import SnapshotError, VMDied, VMLaunchError, VMTimeout
from pytest_adare.loop_thread import sync_twin
from pytest_adare.machine.base import NETDEV_ID, Capability, MachineCommandError, MachineImage
from pytest_adare.machine.console import ConsoleCapture
from pytest_adare.machine.core import MachineCore, check_tag
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
)
from pytest_adare.machine.spec import AgentLink, MachineSpec
from pytest_adare.machine_tools import disk_export, run_state
from pytest_adare.machine_tools.accel import (
    KERNEL_PROGRESS,
    AccelChoice,
    choose_accel,
    record_boot_probe,
)
from pytest_adare.machine_tools.reaper import spawn
from pytest_adare.machine_tools.run_dir import make_run_dir
from pytest_adare.qemu import capture, memory_dump, migration
from pytest_adare.qemu.argv import AGENT_GUEST_PORT, MachineConfig, build_qemu_argv
from pytest_adare.qemu.firmware import (
    BOOT_SILENCE_SECONDS,
    BootWatch,
    find_ovmf,
    firmware_name,
    uefi_vars_copy,
)
from pytest_adare.qemu.qemu_img import qemu_img
from pytest_adare.qemu.virtiofs import VirtiofsDaemon

T = TypeVar("T")
__all__ = ["Machine", "MachineImage"]

_USERNET_FORWARD = re.compile(
    r"TCP\[HOST_FORWARD\]\s+\d+\s+(?P<host>\S+)\s+(?P<port>\d+)\s+\S+\s+(?P<guest>\d+)"
)
# Run states QEMU passes through on its own while the guest stays healthy.
_BENIGN_RUN_STATES = {
    "running", "save-vm", "restore-vm", "finish-migrate", "suspended",
    # saving or loading a whole state (pytest_adare.qemu.migration) passes through these
    "inmigrate", "postmigrate", "prelaunch",
}  # fmt: skip
_LAUNCH_TIMEOUT = 30.0
_KVM_PROGRESS_SECONDS = 8.0
# SeaBIOS or OVMF, a boot loader, then the kernel: longer than a direct kernel boot.
_KVM_FIRMWARE_PROBE_SECONDS = 20.0
_BOOT_WATCH_INTERVAL = 1.0
_BOOT_WATCH_TAIL_BYTES = 64 * 1024


def _optional_path(value: Path | str | None) -> Path | None:
    return None if value is None else Path(value).resolve()


def _drop_link_loss(record: logging.LogRecord) -> bool:
    """Keep qemu.qmp's log free of the reader's "connection reset" lines: when QEMU dies,
    every wait ends in :class:`VMDied` with the cause and the console tail, and a second,
    internal report of the same death only confuses a test's output."""
    text = record.getMessage()
    return not any(name in text for name in ("ConnectionResetError", "EOFError"))


class Machine(MachineCore):
    """One guest VM (one QEMU process) built from an image manifest.

    ``workdir`` receives the overlay disk and ``console.log``; it is created if needed
    and kept after the machine stops (evidence). QEMU always dies with this process.
    """

    backend = "qemu"
    capabilities: frozenset[Capability] = frozenset(Capability)
    """QEMU run here can do everything the contract names."""

    def __init__(
        self,
        manifest: MachineImage,
        workdir: Path,
        spec: MachineSpec | None = None,
        *,
        display: bool = True,
        qemu_binary: str = "qemu-system-x86_64",
        extra_args: Sequence[str] = (),
        kvm_progress_seconds: float = _KVM_PROGRESS_SECONDS,
        boot_silence_seconds: float = BOOT_SILENCE_SECONDS,
        kvm_firmware_probe_seconds: float = _KVM_FIRMWARE_PROBE_SECONDS,
    ) -> None:
        """``spec``: what the VM asks (default: ``MachineSpec()``); the keywords tune
        this backend only (tests shorten its bounds)."""
        spec = spec or MachineSpec()
        self.spec = spec
        self.manifest = manifest
        self.workdir = Path(workdir).resolve()
        self.name = spec.name
        self.lan_ports = spec.lan_ports
        """This machine's NICs on LAN segments (:mod:`pytest_adare.lan`)."""
        self._display = display
        self._qemu_binary = qemu_binary
        self._extra_args = tuple(extra_args)
        self.incoming = spec.incoming
        """Started to receive a saved state, not to boot (see ``qemu.migration``)."""
        self._kvm_progress_seconds = kvm_progress_seconds
        self.firmware = spec.firmware if manifest.kernel is None else "bios"
        """``bios`` or ``uefi``: what boots the disk (a direct-boot kernel: SeaBIOS)."""
        self._boot_silence_seconds = boot_silence_seconds
        self.seed = spec.seed
        """The cloud-init seed attached as a CD-ROM, or None."""
        self.share_disks = spec.share_disks
        self._virtiofs: list[VirtiofsDaemon] = []
        """One virtiofsd per writable share while QEMU runs (:mod:`~.qemu.virtiofs`)."""
        """Read-only disks of shared host folders (:mod:`pytest_adare.machine_tools.share`)."""
        self.agent_link: AgentLink = spec.agent_link
        """What carries the agent's serial link at :attr:`agent_serial_path`."""
        self._kvm_firmware_probe_seconds = kvm_firmware_probe_seconds
        self.uefi_vars_path = self.workdir / "uefi-vars.qcow2"
        self.firmware_log_path = self.workdir / "firmware.log"
        self._uefi_code: Path | None = None
        self.accel: str | None = None
        self.accel_reason: str | None = None
        self.agent_port: int | None = None
        self.argv: list[str] = []
        self.launched_config: MachineConfig | None = None
        """The config of the running (or last) QEMU; ``argv`` is built from it."""
        self.console_log_path = self.workdir / "console.log"
        self.overlay_path = self.workdir / "disk-overlay.qcow2"
        self._socket_dir: Path | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._qmp: QMPClient | None = None
        self._console: ConsoleCapture | None = None
        self._stderr = bytearray()
        self._died: asyncio.Event | None = None
        self._death_reason: str | None = None
        self._exited: asyncio.Event | None = None
        self._tasks: list[asyncio.Task[Any]] = []
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ paths
    @property
    def socket_dir(self) -> Path:
        """Where the Unix sockets live (short: socket paths are limited to ~107 bytes)."""
        if self._socket_dir is None:
            self._socket_dir = make_run_dir(f"adare-{self.name[:16]}-")
            # Also removed when the Machine is dropped (or at exit) without shutdown().
            weakref.finalize(self, shutil.rmtree, self._socket_dir, True)
        return self._socket_dir

    @property
    def qmp_path(self) -> Path:
        """Unix socket of QEMU's QMP monitor (the host listens, QEMU connects)."""
        return self.socket_dir / "qmp.sock"

    @property
    def agent_serial_path(self) -> Path:
        """Unix socket of the guest's ``ttyS1`` (the agent's serial link)."""
        return self.socket_dir / "agent-serial.sock"

    @property
    def qga_path(self) -> Path:
        """Unix socket of the QGA virtio-serial port ``org.qemu.guest_agent.0``."""
        return self.socket_dir / "qga.sock"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    # -------------------------------------------------------------- lifecycle
    def start(self) -> Machine:
        """Prepare, launch QEMU and connect QMP; on failure everything is cleaned up.

        :raise VMLaunchError: QEMU refused the command line or died while starting.
        :raise VMDied: the guest made no progress under KVM and TCG failed too.
        """
        with self._lock:
            if self._proc is not None:
                raise RuntimeError(f"machine {self.name} already started")
            try:
                self._prepare()
                choice = self._choose_accel()
                self._launch(choice)
                if choice.accel == "kvm" and self.manifest.kernel is not None and not self.incoming:
                    self._fall_back_to_tcg_if_stalled(choice)
                elif choice.accel == "kvm" and not choice.probed:
                    self._probe_firmware_boot()
            except BaseException:
                self._terminate()
                raise
        return self

    def _choose_accel(self) -> AccelChoice:
        return choose_accel(
            self.spec.accel,
            probe_kernel=_optional_path(self.manifest.kernel),
            qemu_binary=self._qemu_binary,
        )

    @property
    def firmware_reason(self) -> str:
        """One line for the header, e.g. ``firmware: uefi (OVMF, /usr/share/OVMF/…)``."""
        if self.manifest.kernel is not None:
            return "firmware: bios (direct kernel boot)"
        where = f", {self._uefi_code}" if self._uefi_code is not None else ""
        return f"firmware: {self.firmware} ({firmware_name(self.firmware)}{where})"

    def _prepare(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.socket_dir.mkdir(mode=0o700, exist_ok=True)  # again, after a shutdown
        self.console_log_path.write_bytes(b"")
        if self.manifest.kernel is None:
            self.firmware_log_path.write_bytes(b"")
        if self.firmware == "uefi":
            ovmf = find_ovmf()
            self._uefi_code = ovmf.code
            uefi_vars_copy(ovmf, self.uefi_vars_path)
        if self.manifest.disk is not None:
            base = Path(self.manifest.disk).resolve()
            if not base.is_file():
                raise VMLaunchError(
                    f"base disk {base} does not exist", exitcode=None, command=[], output=""
                )
            self.overlay_path.unlink(missing_ok=True)
            qemu_img(
                "create", "-q", "-f", "qcow2", "-F", self.manifest.format,
                "-b", str(base), str(self.overlay_path),
                what="create the overlay disk",
            )  # fmt: skip
        for index, share in enumerate(self.spec.shared_folders):
            self._virtiofs.append(
                VirtiofsDaemon.start(
                    share, self.socket_dir / f"fs{index}.sock",
                    self.workdir / f"virtiofsd{index}.log",
                )
            )  # fmt: skip

    def config(self, choice: AccelChoice) -> MachineConfig:
        """The :class:`MachineConfig` this machine launches with under ``choice``."""
        return MachineConfig(
            qmp_path=self.qmp_path,
            agent_serial_path=self.agent_serial_path,
            qga_path=self.qga_path,
            qemu_binary=self._qemu_binary,
            spec=self.spec,
            memory_mib=self.spec.memory_for(self.manifest.memory_mib),
            cpus=self.spec.cpus,
            accel=choice.accel,
            cpu_model=choice.cpu_model,
            disk=self.overlay_path if self.manifest.disk is not None else None,
            uefi_code=self._uefi_code if self.firmware == "uefi" else None,
            uefi_vars=self.uefi_vars_path if self.firmware == "uefi" else None,
            firmware_log=self.firmware_log_path if self.manifest.kernel is None else None,
            kernel=_optional_path(self.manifest.kernel),
            initrd=_optional_path(self.manifest.initrd),
            append=_with_panic_exit(self.manifest.append) if self.manifest.kernel else None,
            display=self._display,
            virtiofs_sockets=tuple(daemon.socket_path for daemon in self._virtiofs),
            extra_args=self._extra_args,
        )

    def _launch(self, choice: AccelChoice) -> None:
        self.accel, self.accel_reason = choice.accel, choice.reason
        self.launched_config = self.config(choice)
        self.argv = build_qemu_argv(self.launched_config)
        self._run(self._alaunch(), timeout=_LAUNCH_TIMEOUT + 10)

    async def _alaunch(self) -> None:
        loop = asyncio.get_running_loop()
        self._died, self._exited = asyncio.Event(), asyncio.Event()
        self._death_reason, self._stderr = None, bytearray()
        self.qmp_path.unlink(missing_ok=True)
        qmp = QMPClient(self.name)
        qmp.logger.addFilter(_drop_link_loss)
        await qmp.start_server(str(self.qmp_path))
        self._qmp = qmp
        proc = spawn(
            self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        self._proc = proc
        assert proc.stdout is not None and proc.stderr is not None
        console = ConsoleCapture(self.console_log_path)
        self._console = console
        await loop.connect_read_pipe(lambda: console, proc.stdout)
        stderr = _Collect(self._stderr)
        await loop.connect_read_pipe(lambda: stderr, proc.stderr)
        exited = self._exited
        threading.Thread(target=self._watch_exit, args=(proc, loop, exited), daemon=True).start()
        try:
            await self.bounded(qmp.accept(), _LAUNCH_TIMEOUT, "QEMU to connect to QMP")
        except Exception as exc:  # QEMU died or hung before QMP came up
            await self._await_exit(5)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stderr.closed.wait(), 5)
            raise VMLaunchError(
                "QEMU failed to start",
                exitcode=proc.poll(),
                command=self.argv,
                output=self._stderr.decode(errors="replace"),
            ) from exc
        listener = EventListener(("SHUTDOWN", "GUEST_PANICKED", "STOP"))
        qmp.register_listener(listener)
        self._tasks.append(loop.create_task(self._watch_events(listener)))
        if self.manifest.kernel is None and not self.incoming:
            self._tasks.append(loop.create_task(self._watch_boot()))
        if self.spec.network:
            self.agent_port = await self._read_forwarded_port()

    def _fall_back_to_tcg_if_stalled(self, choice: AccelChoice) -> None:
        try:
            # Under the stall a direct-booted kernel prints nothing at all (the firmware
            # prints nothing on the serial port either), so any output is progress.
            self.wait_for_console(r"\S", self._kvm_progress_seconds)
        except VMTimeout:
            reason = (
                f"accel: tcg (kvm: no kernel progress on the console within "
                f"{self._kvm_progress_seconds:.0f} s; restarted under TCG)"
            )
        except VMDied as exc:
            reason = f"accel: tcg (kvm: guest died while booting: {exc.reason}; restarted)"
        else:
            return
        self._terminate(keep_socket_dir=True)
        self._launch(AccelChoice("tcg", None, reason))

    def _probe_firmware_boot(self) -> None:
        """This firmware boot under KVM is the probe: no kernel progress on the console
        within ``kvm_firmware_probe_seconds`` (or the guest died) → TCG, and remembered."""
        seconds = self._kvm_firmware_probe_seconds
        try:
            self.wait_for_console(KERNEL_PROGRESS.pattern, seconds)
        except VMTimeout:
            why = f"no kernel progress on the console within {seconds:.0f} s of a firmware boot"
        except VMDied as exc:
            died = exc.reason.split(" while waiting for ")[0]
            why = f"guest died during a firmware boot: {died}"
        else:
            choice = record_boot_probe(
                True, f"a firmware boot reached the kernel in under {seconds:.0f} s",
                qemu_binary=self._qemu_binary,
            )  # fmt: skip
            self.accel_reason = choice.reason
            return
        choice = record_boot_probe(False, why, qemu_binary=self._qemu_binary)
        self._terminate(keep_socket_dir=True)
        self._prepare()
        self._launch(replace(choice, reason=choice.reason[:-1] + "; restarted under TCG)"))

    def _watch_exit(
        self, proc: subprocess.Popen[bytes], loop: asyncio.AbstractEventLoop, exited: asyncio.Event
    ) -> None:
        code = proc.wait()
        with contextlib.suppress(RuntimeError):  # loop closed at interpreter exit
            loop.call_soon_threadsafe(self._on_exit, code, exited)

    def _on_exit(self, code: int, exited: asyncio.Event) -> None:
        exited.set()
        if exited is self._exited:  # not a QEMU of an earlier launch (KVM fallback)
            self._mark_dead(f"QEMU exited with code {code}{self._qemu_said()}")

    def _qemu_said(self) -> str:
        """QEMU's last words on stderr (``KVM internal error…``) for a death reason."""
        lines = [line.strip() for line in self._stderr.decode(errors="replace").splitlines()]
        # A KVM failure is followed by a register dump: its error line says more.
        errors = [line for line in lines if "error" in line.lower()]
        said = errors[:2] or [line for line in lines if line][-2:]
        return f"; QEMU said: {' / '.join(said)[:300]}" if said else ""

    async def _watch_boot(self) -> None:
        """End a firmware boot at once when it cannot succeed (:class:`BootWatch`): every
        wait then raises :class:`VMDied` with the cause. After the kernel has started only
        a panic on the console ends it."""
        loop = asyncio.get_running_loop()
        watch = BootWatch(
            self.firmware, silence_seconds=self._boot_silence_seconds, now=loop.time()
        )
        died = self._died
        while died is not None and not died.is_set():
            await asyncio.sleep(_BOOT_WATCH_INTERVAL)
            console_size, console = await asyncio.to_thread(_file_tail, self.console_log_path)
            _, firmware_log = await asyncio.to_thread(_file_tail, self.firmware_log_path)
            screen = b"" if watch.os_started else await self._screen_digest()
            verdict = watch.verdict(
                console=console,
                console_size=console_size,
                firmware_log=firmware_log,
                screen=screen,
                now=loop.time(),
            )
            if verdict is not None:
                last = [line.strip() for line in firmware_log.splitlines() if line.strip()][-2:]
                said = f" (firmware log ends: {' / '.join(last)})" if last else ""
                self._mark_dead(verdict + said)
                return

    async def _screen_digest(self) -> bytes:
        if not self._display:
            return b""
        try:
            image = await self.ascreendump(timeout=10)
        except Exception:  # a failing screendump is no evidence either way
            return b""
        return hashlib.sha256(image.tobytes()).digest()

    async def _watch_events(self, listener: EventListener) -> None:
        async for event in listener:
            name = str(event["event"])
            data: Any = event.get("data") or {}
            if name == "SHUTDOWN":
                self._mark_dead(_shutdown_reason(str(data.get("reason", "?"))))
            elif name == "GUEST_PANICKED":
                self._mark_dead(f"guest panicked ({data.get('action', '?')})")
            elif name == "STOP":
                await self._check_stop()

    async def _check_stop(self) -> None:
        # savevm/loadvm stop the VM briefly too: only a stop that sticks is a death.
        with contextlib.suppress(Exception):
            assert self._qmp is not None
            status = await self._qmp.execute("query-status")
            state = str(status["status"]) if isinstance(status, dict) else "?"
            if state not in _BENIGN_RUN_STATES and state != "paused":
                self._mark_dead(f"guest stopped (run state: {state}){self._qemu_said()}")

    async def _read_forwarded_port(self) -> int:
        text = await self.ahmp("info usernet")
        for match in _USERNET_FORWARD.finditer(text):
            if int(match["guest"]) == AGENT_GUEST_PORT and match["host"] == "127.0.0.1":
                return int(match["port"])
        raise VMLaunchError(
            f"no host forward to guest port {AGENT_GUEST_PORT} in 'info usernet'",
            exitcode=None,
            command=self.argv,
            output=text,
        )

    def shutdown(self, timeout: float = 10.0) -> None:
        """Stop QEMU: QMP ``quit``, then kill if it is still there; then clean up.

        Safe to call more than once and on a machine that never started.
        """
        with self._lock:
            if self._proc is not None and self._proc.poll() is None and self._qmp is not None:
                with contextlib.suppress(Exception):
                    self._run(self._aquit(timeout), timeout=timeout + 5)
            self._terminate()

    async def _aquit(self, timeout: float) -> None:
        assert self._qmp is not None
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._qmp.execute("quit"), timeout)
        await self._await_exit(timeout)

    def kill(self) -> None:
        """Hard stop: SIGKILL QEMU at once, then clean up."""
        with self._lock:
            self._terminate()

    def _terminate(self, keep_socket_dir: bool = False) -> None:
        """Kill QEMU if alive, close QMP, wait for the pipes; always leaves no process."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.kill()
        if proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
            if proc.stdin is not None:
                with contextlib.suppress(OSError):
                    proc.stdin.close()
        with contextlib.suppress(Exception):
            self._run(self._aclose(), timeout=15)
        self._proc = None
        while self._virtiofs:  # after QEMU, whose socket they serve
            self._virtiofs.pop().stop()
        if not keep_socket_dir and self._socket_dir is not None:
            shutil.rmtree(self._socket_dir, ignore_errors=True)

    async def _aclose(self) -> None:
        await self._await_exit(5)
        for task in self._tasks:
            task.cancel()
        self._tasks.clear()
        if self._qmp is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._qmp.disconnect(), 5)
            self._qmp = None
        if self._console is not None:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._console.closed.wait(), 5)

    async def _await_exit(self, timeout: float) -> None:
        if self._exited is not None:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._exited.wait(), timeout)

    def __enter__(self) -> Machine:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.shutdown()

    # ----------------------------------------------------------------- health
    def is_running(self) -> bool:
        """True while QEMU runs and the guest has not shut down, panicked or stopped."""
        return (
            self._proc is not None
            and self._proc.poll() is None
            and self._died is not None
            and not self._died.is_set()
        )

    def _stopped(self) -> bool:
        return self._proc is None

    def console_write(self, data: bytes | str) -> None:
        """Type into the guest's serial console (QEMU's stdin is the console input)."""
        self.check_alive()
        assert self._proc is not None and self._proc.stdin is not None
        self._proc.stdin.write(data.encode() if isinstance(data, str) else data)
        self._proc.stdin.flush()

    # ---------------------------------------------------------------- QMP/HMP
    async def aqmp(self, /, cmd: str, timeout: float = 60.0, **args: Any) -> Any:
        """Run a QMP command and return its ``return`` value.

        :raise MachineCommandError: QEMU answered with an error.
        :raise VMDied: the machine is not running, or QMP failed underneath (the cause
            and the console tail are in the error; no ``qemu.qmp`` state error escapes).
        """
        if self._qmp is None or not self.is_running():
            raise VMDied(f"{self._down_reason()}; cannot run QMP {cmd}", self.console_tail())
        try:
            return await self.bounded(
                self._qmp.execute(cmd, args or None), timeout, f"QMP command {cmd}"
            )
        except ExecuteError as exc:  # QEMU's own answer to the command: the caller's business
            raise MachineCommandError(
                f"QMP {cmd} failed: {exc.error.error.desc}", command=cmd, reply=exc.received
            ) from exc
        except (QMPError, OSError, EOFError) as exc:
            # The QMP connection itself failed (QEMU died or closed it): that is the
            # machine dying, whatever state qemu.qmp's client was left in.
            raise self._qmp_lost(cmd, exc) from exc

    def _qmp_lost(self, cmd: str, exc: BaseException) -> VMDied:
        cause = f"{type(exc).__name__}: {exc}".strip()
        if self.is_running():
            reason = f"QMP connection of {self.name} lost during {cmd} ({cause})"
        else:
            reason = f"{self._down_reason()} (QMP {cmd} failed: {cause})"
        return VMDied(reason, self.console_tail())

    async def ahmp(self, line: str, timeout: float = 60.0) -> str:
        """Run a human-monitor command (via QMP) and return its text output."""
        return str(await self.aqmp("human-monitor-command", timeout, **{"command-line": line}))

    qmp = sync_twin(aqmp)
    hmp = sync_twin(ahmp)

    async def areset(self, timeout: float = 60.0) -> None:
        """Hard-reset the guest (power-cycle) while QEMU keeps running; returns once the
        guest writes to its console again (at most ``timeout`` s)."""
        # -no-reboot turns every reset into an exit, QMP's own system_reset included,
        # and the firmware resets once more on a warm boot. So resets are allowed
        # until the guest writes to its console again (its kernel or init is up).
        mark = self.console_mark()
        await self.aqmp("set-action", timeout, reboot="reset")
        try:
            await self.aqmp("system_reset", timeout)
            with contextlib.suppress(VMTimeout):
                await self.await_for_console(r"\S", timeout, since=mark)
        finally:
            if self.is_running():
                await self.aqmp("set-action", timeout, reboot="shutdown")

    # -------------------------------------------------------------- run state
    def paused(self, *, resume: bool = True) -> contextlib.AbstractAsyncContextManager[float]:
        """``async with machine.paused():`` the guest's CPUs stopped (``stop``/``cont``);
        yields the host's epoch time at the pause (see :mod:`.run_state`)."""
        return run_state.paused(self, resume=resume)

    async def aresume(self) -> None:
        """Let a paused guest run again (``cont``); nothing when it already runs."""
        await run_state.resume_guest(self)

    # -------------------------------------------------------------- snapshots
    async def _ahmp_checked(self, line: str, timeout: float) -> None:
        output = (await self.ahmp(line, timeout)).strip()
        if output:  # savevm/loadvm print nothing on success, an error otherwise
            raise SnapshotError(f"'{line}' failed: {output}")

    async def asavevm(self, tag: str, timeout: float = 120.0) -> None:
        """Save the whole VM state (RAM, devices, disk) under ``tag`` in the overlay."""
        await self._ahmp_checked(f"savevm {check_tag(tag)}", timeout)

    async def aloadvm(self, tag: str, timeout: float = 120.0) -> None:
        """Return the VM to the state saved under ``tag`` (it keeps running from there)."""
        await self._ahmp_checked(f"loadvm {check_tag(tag)}", timeout)

    async def asave_state(self, path: Path, timeout: float = 120.0) -> int:
        """Pause and write the whole state to ``path`` (see :mod:`.migration`); its size.
        The machine stays paused: :meth:`aresume` lets it run on."""
        return await migration.save_state(self, path, timeout)

    async def aload_state(self, path: Path, timeout: float = 120.0) -> None:
        """Load the state in ``path`` into this machine (started ``incoming=True``) and run."""
        await migration.load_state(self, path, timeout)

    # ---------------------------------------------------------- host-side GUI
    async def ascreendump_png(self, timeout: float = 30.0) -> bytes:
        """The guest's display as QEMU's PNG (QMP ``screendump``; needs ``display=True``)."""
        path = self.socket_dir / f"screendump-{os.urandom(4).hex()}.png"
        try:
            await self.aqmp("screendump", timeout, filename=str(path), format="png")
            return await asyncio.to_thread(path.read_bytes)
        finally:
            await asyncio.to_thread(path.unlink, missing_ok=True)

    async def asend_input(self, events: list[dict[str, Any]]) -> None:
        """Send raw ``input-send-event`` events."""
        await self.aqmp("input-send-event", 30.0, events=events)

    # --------------------------------------------------------------- evidence
    async def adump_memory(
        self, path: str | Path, format: DumpFormat = "elf", *, resume: bool = True,
        timeout: float = DUMP_TIMEOUT,
    ) -> MemoryDump:  # fmt: skip
        """The guest's RAM to ``path`` (see :mod:`.memory_dump`)."""
        return await memory_dump.dump_guest_memory(
            self, path, format=format, resume=resume, timeout=timeout
        )

    def network_capture(
        self, path: str | Path, *, snaplen: int = CAPTURE_SNAPLEN,
        max_bytes: int = CAPTURE_MAX_BYTES, nic: str | None = None,
    ) -> contextlib.AbstractAsyncContextManager[NetworkCapture]:  # fmt: skip
        """``async with machine.network_capture(path):`` one NIC's traffic as pcap: ``nic``
        (``net0``, ``lan0``, ...), by default the user-mode NIC, else the first LAN NIC."""
        return capture.network_capture(
            self, path, netdev=self._nic(nic), snaplen=snaplen, max_bytes=max_bytes
        )

    def _nic(self, nic: str | None) -> str:
        """The netdev id of ``nic`` (or the default one).

        :raise ValueError: this machine has no such NIC.
        """
        nics = ([NETDEV_ID] if self.spec.network else []) + [p.netdev for p in self.lan_ports]
        if nic is None and nics:
            return nics[0]
        if nic not in nics:
            known = ", ".join(nics) or "none"
            raise ValueError(f"{self.name} has no NIC {nic!r} (its NICs: {known})")
        return nic

    def active_captures(self) -> list[NetworkCapture]:
        """The captures writing now (oldest first)."""
        return capture.active_captures(self)

    async def aexport_disk(
        self, path: str | Path, format: DiskFormat = "raw", *,
        qga: FreezeAgent | None = None, flush: Flush | None = None,
    ) -> DiskExport:  # fmt: skip
        """The disk now (quiesced, paused) to ``path`` (see :mod:`.disk_export`)."""
        return await disk_export.export_disk(self, path, format=format, qga=qga, flush=flush)

    async def aset_link(self, up: bool, *, nic: str | None = None) -> None:
        """Set a guest NIC's link up or down (QMP ``set_link``; the guest sees carrier):
        ``nic`` as for :meth:`network_capture`."""
        await self.aqmp("set_link", 30.0, name=self._nic(nic), up=up)

    async def ahypervisor_version(self) -> str:
        """``major.minor.micro (package)`` from QMP ``query-version``."""
        answer: dict[str, Any] = await self.aqmp("query-version")
        numbers = answer.get("qemu", {})
        package = str(answer.get("package", "")).strip()
        version = f"{numbers.get('major')}.{numbers.get('minor')}.{numbers.get('micro')}"
        return f"{version} ({package})" if package else version

    def keep_hint(self, sockets: Path, loadvm: str | None) -> str:
        """The command line that boots the kept disk again: this QEMU's, its sockets in
        ``sockets`` (the originals are removed on close), QMP listening, and ``-loadvm``
        when a ready state was saved. A warm-started QEMU waited for a migration stream
        (``-incoming defer``); the kept disk boots without one, and QEMU refuses
        ``-incoming`` beside ``-loadvm``."""
        assert self.launched_config is not None, "a kept machine was started"
        config = replace(
            self.launched_config,
            qmp_path=sockets / "qmp.sock",
            qmp_listen=True,
            agent_serial_path=sockets / "agent-serial.sock",
            qga_path=sockets / "qga.sock" if self.launched_config.qga_path else None,
            # A writable share's virtiofsd ends with this run: the kept disk boots without.
            spec=replace(self.launched_config.spec, incoming=False, shared_folders=()),
            virtiofs_sockets=(),
        )
        argv = build_qemu_argv(config)
        if loadvm is not None:
            argv += ["-loadvm", loadvm]
        return shlex.join(argv)


def _file_tail(path: Path) -> tuple[int, str]:
    """The size of ``path`` and its last ``_BOOT_WATCH_TAIL_BYTES`` as text."""
    try:
        with path.open("rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            handle.seek(max(0, size - _BOOT_WATCH_TAIL_BYTES))
            return size, handle.read().decode("utf-8", errors="replace")
    except OSError:
        return 0, ""


def _with_panic_exit(append: str | None) -> str:
    """``append`` plus ``panic=-1``: a panicking kernel reboots, which -no-reboot ends."""
    words = (append or "").split()
    if any(word.startswith("panic=") for word in words):
        return " ".join(words)
    return " ".join([*words, "panic=-1"])


def _shutdown_reason(reason: str) -> str:
    if reason == "guest-reset":  # -no-reboot turns a reboot (and panic=-1) into an exit
        return "guest rebooted or its kernel panicked (QMP SHUTDOWN, reason: guest-reset)"
    if reason.startswith("host-"):
        return f"QEMU was told to quit (QMP SHUTDOWN, reason: {reason})"
    return f"guest shut down (QMP SHUTDOWN, reason: {reason})"


class _Collect(asyncio.Protocol):
    """Collects QEMU's stderr (its own messages) for launch errors."""

    def __init__(self, sink: bytearray, limit: int = 256 * 1024) -> None:
        self._sink = sink
        self._limit = limit
        self.closed = asyncio.Event()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed.set()

    def data_received(self, data: bytes) -> None:
        self._sink += data
        del self._sink[: max(0, len(self._sink) - self._limit)]
