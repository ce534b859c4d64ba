"""``LibvirtMachine``: one guest as a transient libvirt domain, a
:class:`~pytest_adare.machine.base.MachineBackend` (start, shutdown, bounded waits,
the console, snapshots, screendump and input, a memory dump, the disk).

What goes where:

- boot files and disk: the ``adare`` pool (:mod:`.storage`); the domain boots the
  image's kernel with the VM's initrd (the agent's hand-off) over a per-VM overlay;
- console: serial0's stream, read from the moment the domain exists (it is created
  paused, the stream opened, then resumed) into the same
  :class:`~pytest_adare.machine.console.ConsoleCapture` the QEMU backend uses;
- agent serial link: a :class:`~.streams.StreamBridge` socket at :attr:`agent_serial_path`
  (the ISA serial port's console stream, or the virtio-serial channel's stream);
- QGA: a :class:`~.qga_proxy.QgaProxy` socket at :attr:`qga_path`
  (``virDomainQemuAgentCommand``);
- snapshots: internal snapshots with memory (``virDomainSnapshotCreateXML``, revert);
- screen: ``virDomainScreenshot``; input: QMP ``input-send-event`` through libvirt's
  QMP passthrough (``virDomainQemuMonitorCommand``, used only in this module);
- pause: ``virDomainSuspend``/``Resume``; memory: ``virDomainCoreDumpWithFormat``;
- LAN NICs: ``<interface type='network'>`` on each LAN's isolated network
  (:mod:`.network`); their link cut and restored with ``virDomainUpdateDeviceFlags``
  (``<link state='down'/>``, as ``virsh domif-setlink``);
- death: a watcher polls the domain state (and is woken when the console stream ends),
  so every bounded wait ends at once with :class:`VMDied` when the domain is gone.

Not supported here (:class:`~pytest_adare.machine.base.UnsupportedFeature`, named in
:attr:`LibvirtMachine.capabilities` by its absence): fw_cfg hand-off, a cloud-init seed,
UEFI firmware, saving or loading a whole state (warm start), a network capture (QEMU
would write the file on the hypervisor's host as its own user), setting the link of a
NIC that is not on a LAN, a hard reset (a reboot ends the domain), keeping the disk (it
is a volume of the domain).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import shutil
import socket
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

from PIL import Image

from pytest_adare.errors import AdareError, SnapshotError
from pytest_adare.libvirt_backend.connection import (
    HypervisorError,
    error_text,
    is_local,
    is_session,
    libvirt_module,
    libvirt_qemu_module,
    open_connection,
)
from pytest_adare.libvirt_backend.domain_xml import (
    DomainConfig,
    DomainType,
    agent_device,
    build_domain_xml,
    build_snapshot_xml,
    lan_interface_xml,
)
from pytest_adare.libvirt_backend.qga_proxy import QgaProxy
from pytest_adare.libvirt_backend.reaper import new_domain_name, reap
from pytest_adare.libvirt_backend.storage import (
    UPLOAD_WAIT,
    create_vm_volume,
    delete_vm_volumes,
    ensure_base_volume,
    ensure_pool,
    refresh_pool,
    upload_vm_file,
    virtual_size,
)
from pytest_adare.libvirt_backend.streams import StreamBridge, StreamPump
from pytest_adare.machine.base import (
    Capability,
    MachineBackend,
    MachineCommandError,
    MachineFactory,
    MachineImage,
    unsupported,
)
from pytest_adare.machine.console import ConsoleCapture
from pytest_adare.machine.core import MachineCore, check_tag
from pytest_adare.machine.results import (
    CAPTURE_MAX_BYTES,
    CAPTURE_SNAPLEN,
    DUMP_FORMATS,
    DUMP_TIMEOUT,
    DiskExport,
    DiskFormat,
    DumpFormat,
    Flush,
    FreezeAgent,
    MemoryDump,
    MemoryDumpFailed,
    NetworkCapture,
    new_file_target,
)
from pytest_adare.machine.spec import MachineSpec
from pytest_adare.machine_tools.accel import choose_accel
from pytest_adare.machine_tools.disk_export import export_disk
from pytest_adare.machine_tools.run_dir import make_run_dir

T = TypeVar("T")
STATE_POLL = 1.0
"""Seconds between domain state checks while the machine runs."""
MAX_SCREENSHOT_BYTES = 64 << 20
"""Bound on one screenshot from the hypervisor."""
BACKEND = "libvirt"
# What every domain can do; exporting the disk needs the overlay readable here (local).
_CAPABILITIES = frozenset(
    {Capability.SCREENDUMP, Capability.INPUT, Capability.SNAPSHOT, Capability.MEMORY_DUMP}
)
_DUMP_FORMATS = {
    "elf": "VIR_DOMAIN_CORE_DUMP_FORMAT_RAW",
    "kdump-zlib": "VIR_DOMAIN_CORE_DUMP_FORMAT_KDUMP_ZLIB",
    "kdump-lzo": "VIR_DOMAIN_CORE_DUMP_FORMAT_KDUMP_LZO",
    "kdump-snappy": "VIR_DOMAIN_CORE_DUMP_FORMAT_KDUMP_SNAPPY",
    "win-dmp": "VIR_DOMAIN_CORE_DUMP_FORMAT_WIN_DMP",
}


class LibvirtMachine(MachineCore):
    """One guest as a transient domain on the libvirt daemon at ``uri``.

    Constructed like :class:`~pytest_adare.qemu.machine.Machine` (the VM's machine
    factory signature) plus ``uri``; ``workdir`` gets ``console.log``.
    """

    backend = BACKEND
    # Monitor passthrough and the guest's PS/2 queue both need a slower pace than QEMU's.
    type_key_interval = 0.05

    SUPPORTED = frozenset({"name", "memory_mib", "cpus", "accel", "network", "agent_link",
                           "lan_ports"})  # fmt: skip
    """The :class:`~pytest_adare.machine.spec.MachineSpec` fields a domain honours; any
    other field away from its default is refused (``MachineSpec.unsupported_by``)."""

    def __init__(
        self,
        manifest: MachineImage,
        workdir: Path,
        spec: MachineSpec | None = None,
        *,
        uri: str,
        display: bool = True,
        agent_serial_device: str | None = None,
    ) -> None:
        """``agent_serial_device``: the guest device the agent serves (the domain XML
        follows it; ``spec.agent_link`` says the same for QEMU)."""
        spec = spec or MachineSpec()
        refused = spec.unsupported_by(self.SUPPORTED)
        if manifest.kernel is None:
            refused.append("a disk without a direct-boot kernel")
        if refused:
            raise unsupported(BACKEND, ", ".join(refused))
        self.spec = spec
        self.manifest = manifest
        self.workdir = Path(workdir).resolve()
        self.name = spec.name
        self.uri = uri
        self.incoming = False
        self.firmware = "bios"
        self._display = display
        self._agent = agent_device(agent_serial_device)
        self.lan_ports = spec.lan_ports
        self.accel: str | None = None
        self.accel_reason: str | None = None
        self.agent_port: int | None = None
        self.argv: list[str] = []
        self.launched_config: None = None
        self.pid: int | None = None
        self.console_log_path = self.workdir / "console.log"
        self._overlay_path: Path | None = None
        self.domain_name = new_domain_name()
        self.domain_xml = ""
        self._socket_dir: Path | None = None
        self._conn: Any = None
        self._pool: Any = None
        self._domain: Any = None
        self._console: ConsoleCapture | None = None
        self._pump: StreamPump | None = None
        self._bridges: list[StreamBridge] = []
        self._qga_proxy: QgaProxy | None = None
        self._died: asyncio.Event | None = None
        self._death_reason: str | None = None
        self._watch: asyncio.Task[None] | None = None
        self._wake_watch = threading.Event()

    # ------------------------------------------------------------------ paths
    @property
    def capabilities(self) -> frozenset[Capability]:
        """Screendump, input, snapshots, a memory dump; exporting the disk when local;
        setting the link when the domain has LAN NICs."""
        local = {Capability.DISK_EXPORT} if is_local(self.uri) else set()
        link = {Capability.LINK} if self.lan_ports else set()
        return _CAPABILITIES | local | link

    @property
    def socket_dir(self) -> Path:
        if self._socket_dir is None:
            self._socket_dir = make_run_dir("adare-lv-")
        return self._socket_dir

    @property
    def agent_serial_path(self) -> Path:
        """The local socket joined to the guest's agent serial device."""
        return self.socket_dir / "agent-serial.sock"

    @property
    def qga_path(self) -> Path:
        """The local socket joined to the guest's ``org.qemu.guest_agent.0`` channel."""
        return self.socket_dir / "qga.sock"

    @property
    def qmp_path(self) -> None:
        """None: libvirt owns the domain's QMP monitor."""
        return None

    @property
    def overlay_path(self) -> Path:
        """The overlay volume's path; on a local hypervisor this machine reads it too.

        :raise AdareError: the hypervisor is remote, or the machine never started.
        """
        if not is_local(self.uri):
            raise unsupported(BACKEND, f"the disk of a domain on the remote {self.uri}")
        if self._overlay_path is None:
            raise AdareError(f"machine {self.name} has no overlay (start() it first)")
        return self._overlay_path

    # -------------------------------------------------------------- lifecycle
    def start(self) -> MachineBackend:
        """Upload what the pool lacks, create the domain paused, attach, resume.

        :raise VMLaunchError: the hypervisor, its pool or the domain failed (libvirt's reason).
        """
        self._death_reason = None
        self.workdir.mkdir(parents=True, exist_ok=True)
        try:
            self._start()
        except BaseException:
            self.shutdown()
            raise
        return self

    def _start(self) -> None:
        libvirt = libvirt_module()
        self._conn = open_connection(self.uri)
        domain_type = self._choose_domain_type()
        config = self._domain_config(domain_type)
        self.domain_xml = build_domain_xml(config)
        self.argv = ["libvirt", self.uri, self.domain_name]
        try:
            self._domain = self._conn.createXML(self.domain_xml, libvirt.VIR_DOMAIN_START_PAUSED)
        except libvirt.libvirtError as exc:
            raise HypervisorError(
                f"libvirt ({self.uri}) could not start domain {self.domain_name}: {error_text(exc)}"
            ) from None
        self._console = ConsoleCapture(self.console_log_path)
        self._died = asyncio.Event()
        self._run(self._attach())
        try:
            self._domain.resume()
        except libvirt.libvirtError as exc:
            raise HypervisorError(f"resuming {self.domain_name}: {error_text(exc)}") from None

    def _choose_domain_type(self) -> DomainType:
        """``kvm`` or ``qemu`` (TCG): the local accel choice on this machine's daemon; on
        another host ``auto`` is TCG (our KVM probe cannot run there)."""
        if is_local(self.uri):
            kernel = self.manifest.kernel
            choice = choose_accel(
                self.spec.accel, probe_kernel=None if kernel is None else Path(kernel)
            )
            self.accel, self.accel_reason = choice.accel, f"libvirt {self.uri}; {choice.reason}"
        else:
            self.accel = "kvm" if self.spec.accel == "kvm" else "tcg"
            self.accel_reason = (
                f"libvirt {self.uri}; accel: {self.accel} ("
                + ("asked for" if self.spec.accel != "auto" else "auto on a remote host: TCG")
                + ")"
            )
        return "kvm" if self.accel == "kvm" else "qemu"

    def _domain_config(self, domain_type: DomainType) -> DomainConfig:
        manifest = self.manifest
        assert manifest.kernel is not None and manifest.disk is not None
        self._pool = ensure_pool(self._conn, self.uri)
        reaped = reap(self._conn, self._pool)
        if reaped:
            note = f"removed {len(reaped)} leftover(s) of killed runs"
            self.accel_reason = f"{self.accel_reason}; {note}"
        disk = Path(manifest.disk)
        sha = getattr(manifest, "disk_sha256", None)
        known = sha if isinstance(sha, str) else None
        base, _ = ensure_base_volume(self._pool, "disk", disk, known)
        kernel, _ = ensure_base_volume(self._pool, "kernel", Path(manifest.kernel))
        initrd = None
        if manifest.initrd is not None:
            initrd = upload_vm_file(self._pool, self.domain_name, Path(manifest.initrd)).path()
        size = virtual_size(disk, manifest.format)
        overlay = create_vm_volume(self._pool, self.domain_name, base, manifest.format, size)
        self._overlay_path = Path(overlay.path())
        return DomainConfig(
            name=self.domain_name,
            disk=overlay.path(),
            memory_mib=self.spec.memory_for(self.manifest.memory_mib),
            cpus=self.spec.cpus,
            domain_type=domain_type,
            kernel=kernel.path(),
            initrd=initrd,
            append=manifest.append,
            agent=self._agent,
            network=self.spec.network,
            display=self._display,
            owner_host=socket.gethostname(),
            owner_pid=os.getpid(),
            lan_ports=self.lan_ports,
            # A session daemon runs as this user and can bind in our private socket
            # directory; the system daemon's QEMU user cannot, and chooses well itself.
            channel_dir=str(self._session_channel_dir()) if is_session(self.uri) else None,
        )

    def _session_channel_dir(self) -> Path:
        channels = self.socket_dir / "channels"
        channels.mkdir(mode=0o700, exist_ok=True)
        return channels

    async def _attach(self) -> None:
        """Console pump, agent and QGA bridges, and the state watcher, on the loop."""
        libvirt = libvirt_module()
        loop = asyncio.get_running_loop()
        console = self._console
        assert console is not None and self._domain is not None
        stream = self._conn.newStream(libvirt.VIR_STREAM_NONBLOCK)
        await asyncio.to_thread(
            self._domain.openConsole, "serial0", stream, libvirt.VIR_DOMAIN_CONSOLE_FORCE
        )

        def on_data(data: bytes) -> None:
            loop.call_soon_threadsafe(console.data_received, data)

        def on_end(why: str) -> None:
            self._wake_watch.set()

        self._pump = StreamPump(stream, on_data, on_end)
        self._pump.start()
        if self._agent is not None:
            self._bridges.append(
                StreamBridge(self.agent_serial_path, self._open_agent_stream, "agent").start()
            )
        self._qga_proxy = QgaProxy(self.qga_path, self._agent_command).start()
        self._watch = asyncio.create_task(self._watch_state(), name=f"watch {self.domain_name}")

    def _open_agent_stream(self) -> Any:
        """A fresh stream to the agent's device: the UART's console or the virtio channel
        (FORCE: an older stream of ours is dropped)."""
        libvirt = libvirt_module()
        assert self._agent is not None
        stream = self._conn.newStream(libvirt.VIR_STREAM_NONBLOCK)
        if self._agent.kind == "serial":
            self._domain.openConsole(self._agent.alias, stream, libvirt.VIR_DOMAIN_CONSOLE_FORCE)
        else:
            self._domain.openChannel(self._agent.alias, stream, libvirt.VIR_DOMAIN_CHANNEL_FORCE)
        return stream

    def _agent_command(self, text: str, timeout: int) -> str:
        return str(libvirt_qemu_module().qemuAgentCommand(self._domain, text, timeout, 0))

    async def _watch_state(self) -> None:
        while True:
            reason = await asyncio.to_thread(self._down_state, STATE_POLL)
            if reason is not None:
                self._mark_dead(reason)
                return

    def _down_state(self, wait: float) -> str | None:
        """After at most ``wait`` s (less when woken): why the domain is down, or None."""
        self._wake_watch.wait(wait)
        self._wake_watch.clear()
        libvirt = libvirt_module()
        try:
            state, reason = self._domain.state(0)
        except libvirt.libvirtError as exc:
            return f"domain {self.domain_name} is gone ({error_text(exc)})"
        if state in (libvirt.VIR_DOMAIN_SHUTOFF, libvirt.VIR_DOMAIN_SHUTDOWN):
            return f"domain {self.domain_name} shut off (libvirt state {state}, reason {reason})"
        if state == libvirt.VIR_DOMAIN_CRASHED:
            return f"domain {self.domain_name} crashed (libvirt reason {reason})"
        return None

    def shutdown(self, timeout: float = 10.0) -> None:
        """Destroy the domain (transient: it is gone) and remove the VM's volumes."""
        libvirt = libvirt_module()
        if self._died is not None:
            self._run(self._stop_watch())
        for bridge in self._bridges:
            bridge.close()
        self._bridges.clear()
        if self._qga_proxy is not None:
            self._qga_proxy.close()
            self._qga_proxy = None
        if self._pump is not None:
            self._pump.stop()
            self._pump = None
        if self._domain is not None:
            with contextlib.suppress(libvirt.libvirtError):
                self._domain.destroy()
            self._domain = None
        if self._pool is not None:
            delete_vm_volumes(self._pool, self.domain_name)
        if self._conn is not None:
            with contextlib.suppress(libvirt.libvirtError):
                self._conn.close()
            self._conn = None
        if self._socket_dir is not None:
            # Also the session daemon's channel sockets, which QEMU leaves behind.
            shutil.rmtree(self._socket_dir, ignore_errors=True)

    async def _stop_watch(self) -> None:
        self._mark_dead(self._death_reason or f"machine {self.name} was shut down")
        if self._watch is not None:
            self._watch.cancel()
            self._wake_watch.set()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._watch
        if self._console is not None:
            self._console.connection_lost(None)

    def kill(self) -> None:
        """Same as :meth:`shutdown`: destroying a domain is immediate."""
        self.shutdown()

    def __enter__(self) -> MachineBackend:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown()

    # ----------------------------------------------------------------- health
    def is_running(self) -> bool:
        return self._domain is not None and self._died is not None and not self._died.is_set()

    def console_write(self, data: bytes | str) -> None:
        """Type into the guest's serial console (the console stream's input)."""
        self.check_alive()
        assert self._pump is not None
        self._pump.send(data.encode() if isinstance(data, str) else data)

    # ------------------------------------------------------ monitor passthrough
    async def _aqmp(self, cmd: str, timeout: float = 60.0, **args: Any) -> Any:
        """A QMP command through libvirt's passthrough; its ``return`` value.

        :raise MachineCommandError: QEMU answered with an error. :raise VMDied: not running.
        """
        self.check_alive()
        text = json.dumps({"execute": cmd, **({"arguments": args} if args else {})})
        answer = await self.bounded(
            asyncio.to_thread(self._monitor, text, cmd), timeout, f"QMP command {cmd}"
        )
        reply = json.loads(answer)
        if "error" in reply:
            why = reply["error"].get("desc", reply["error"])
            raise MachineCommandError(f"QMP {cmd} failed: {why}", command=cmd, reply=reply)
        return reply.get("return")

    def _monitor(self, text: str, cmd: str) -> str:
        libvirt = libvirt_module()
        try:
            return str(libvirt_qemu_module().qemuMonitorCommand(self._domain, text, 0))
        except libvirt.libvirtError as exc:
            raise MachineCommandError(
                f"libvirt monitor command {cmd} failed: {error_text(exc)}", command=cmd
            ) from None

    async def _ahmp(self, line: str, timeout: float = 60.0) -> str:
        return str(await self._aqmp("human-monitor-command", timeout, **{"command-line": line}))

    # -------------------------------------------------------------- run state
    @asynccontextmanager
    async def _paused(self, resume: bool) -> AsyncIterator[float]:
        was_running = await asyncio.to_thread(self._domain_running)
        if was_running:
            await asyncio.to_thread(self._call, "suspend")
        try:
            yield time.time()
        finally:
            if was_running and resume and self.is_running():
                await asyncio.to_thread(self._call, "resume")

    def paused(self, *, resume: bool = True) -> AbstractAsyncContextManager[float]:
        """``async with machine.paused():`` the domain suspended (``virDomainSuspend``);
        yields the host's epoch time at the pause. A domain already paused stays so."""
        return self._paused(resume)

    async def aresume(self) -> None:
        """Let a paused domain run again; nothing when it runs."""
        self.check_alive()
        if not await asyncio.to_thread(self._domain_running):
            await asyncio.to_thread(self._call, "resume")

    def _domain_running(self) -> bool:
        self.check_alive()
        return bool(self._domain.state(0)[0] == libvirt_module().VIR_DOMAIN_RUNNING)

    def _call(self, method: str) -> None:
        libvirt = libvirt_module()
        try:
            getattr(self._domain, method)()
        except libvirt.libvirtError as exc:
            raise MachineCommandError(
                f"{method} of {self.domain_name}: {error_text(exc)}", command=method
            ) from None

    async def areset(self, timeout: float = 60.0) -> None:
        """:raise UnsupportedFeature: a reboot ends the domain; use ``vm.reboot()``."""
        raise self._unsupported(Capability.RESET)

    # -------------------------------------------------------------- snapshots
    async def asavevm(self, tag: str, timeout: float = 120.0) -> None:
        """An internal snapshot ``tag`` with memory (an older one of that name is replaced).

        :raise SnapshotError: libvirt refused (its reason).
        """
        self.check_alive()
        await self.bounded(asyncio.to_thread(self._save, check_tag(tag)), timeout,
                           f"snapshot {tag}")  # fmt: skip

    def _save(self, tag: str) -> None:
        libvirt = libvirt_module()
        try:
            with contextlib.suppress(libvirt.libvirtError):
                self._domain.snapshotLookupByName(tag, 0).delete(0)
            self._domain.snapshotCreateXML(build_snapshot_xml(tag), 0)
        except libvirt.libvirtError as exc:
            why = error_text(exc)
            raise SnapshotError(f"snapshot {tag} of {self.domain_name}: {why}") from None

    async def aloadvm(self, tag: str, timeout: float = 120.0) -> None:
        """Return to snapshot ``tag``; the guest runs on from there.

        QEMU's ``loadvm`` of the internal snapshot libvirt made, through the monitor
        passthrough: 0.3 s here, where ``virDomainRevertToSnapshot`` of the same snapshot
        takes 3 s (libvirt pauses, reloads and re-syncs the domain around it). The
        domain stays running either way, so libvirt's view of it does not change.

        :raise SnapshotError: no such snapshot, or QEMU refused.
        """
        output = (await self._ahmp(f"loadvm {check_tag(tag)}", timeout)).strip()
        if output:  # loadvm prints nothing on success, an error otherwise
            raise SnapshotError(f"'loadvm {tag}' on {self.domain_name} failed: {output}")

    async def asave_state(self, path: Path, timeout: float = 120.0) -> int:
        """:raise UnsupportedFeature: the state file would be written on the hypervisor."""
        raise self._unsupported(Capability.MIGRATION)

    async def aload_state(self, path: Path, timeout: float = 120.0) -> None:
        """:raise UnsupportedFeature: see :meth:`asave_state`."""
        raise self._unsupported(Capability.MIGRATION)

    # ---------------------------------------------------------- host-side GUI
    async def ascreendump_png(self, timeout: float = 30.0) -> bytes:
        """The display via ``virDomainScreenshot``, as PNG (a PPM is re-encoded).

        :raise MachineCommandError: libvirt failed, or the screenshot is too large.
        """
        self.check_alive()
        data = await self.bounded(asyncio.to_thread(self._screenshot), timeout, "a screenshot")
        if data.startswith(b"\x89PNG"):
            return data
        return await asyncio.to_thread(_to_png, data)

    def _screenshot(self) -> bytes:
        libvirt = libvirt_module()
        stream = self._conn.newStream(0)
        chunks: list[bytes] = []
        total = 0
        try:
            self._domain.screenshot(stream, 0, 0)
            while True:
                data = stream.recv(READ_SCREEN)
                if not isinstance(data, bytes) or not data:
                    break
                total += len(data)
                if total > MAX_SCREENSHOT_BYTES:
                    raise MachineCommandError(
                        f"a screenshot above {MAX_SCREENSHOT_BYTES} bytes", command="screenshot"
                    )
                chunks.append(data)
            stream.finish()
        except libvirt.libvirtError as exc:
            with contextlib.suppress(libvirt.libvirtError):
                stream.abort()
            raise MachineCommandError(
                f"screenshot of {self.domain_name}: {error_text(exc)}", command="screenshot"
            ) from None
        return b"".join(chunks)

    # --------------------------------------------------------------- evidence

    async def asend_input(self, events: list[dict[str, Any]]) -> None:
        """Raw ``input-send-event`` events through the QMP passthrough."""
        await self._aqmp("input-send-event", 30.0, events=events)

    # --------------------------------------------------------------- evidence
    async def adump_memory(
        self, path: str | Path, format: DumpFormat = "elf", *, resume: bool = True,
        timeout: float = DUMP_TIMEOUT,
    ) -> MemoryDump:  # fmt: skip
        """The guest's RAM to the local ``path`` via ``virDomainCoreDumpWithFormat``
        (memory only; the domain is paused meanwhile): written into the pool on the
        hypervisor, downloaded, removed there. ``resume=False`` leaves it paused.

        :raise MemoryDumpFailed: libvirt failed (its reason); nothing is left at ``path``.
        """
        if format not in DUMP_FORMATS:
            raise ValueError(f"format must be one of {DUMP_FORMATS}, got {format!r}")
        target = new_file_target(path)
        self.check_alive()
        started = time.monotonic()
        await self.bounded(asyncio.to_thread(self._dump_memory, target, format, resume),
                           timeout, "the memory dump")  # fmt: skip
        return MemoryDump(target, format, target.stat().st_size, time.monotonic() - started)

    def _dump_memory(self, target: Path, format: str, resume: bool) -> None:
        libvirt = libvirt_module()
        name = f"{self.domain_name}-memory.{format}"
        pool_dir = Path(ET.fromstring(self._pool.XMLDesc(0)).findtext("target/path") or "/")
        part = target.with_name(target.name + ".part")
        try:
            self._domain.coreDumpWithFormat(str(pool_dir / name),
                                            getattr(libvirt, _DUMP_FORMATS[format]),
                                            libvirt.VIR_DUMP_MEMORY_ONLY)  # fmt: skip
            if not resume:
                self._domain.suspend()
            # The dump is a file libvirtd wrote, not a volume it made: the pool must be
            # re-read, also while another runner makes a volume in it.
            refresh_pool(self._pool, wait=UPLOAD_WAIT)
            volume = self._pool.storageVolLookupByName(name)
            stream = self._conn.newStream(0)
            volume.download(stream, 0, 0, 0)
            with part.open("wb") as out:
                while data := stream.recv(DOWNLOAD_CHUNK):
                    if not isinstance(data, bytes):
                        break
                    out.write(data)
            stream.finish()
            part.rename(target)
        except libvirt.libvirtError as exc:
            part.unlink(missing_ok=True)
            raise MemoryDumpFailed(
                f"memory dump of {self.domain_name}: {error_text(exc)}"
            ) from None
        finally:
            with contextlib.suppress(libvirt.libvirtError):
                self._pool.storageVolLookupByName(name).delete(0)

    def network_capture(
        self, path: str | Path, *, snaplen: int = CAPTURE_SNAPLEN,
        max_bytes: int = CAPTURE_MAX_BYTES, nic: str | None = None,
    ) -> AbstractAsyncContextManager[NetworkCapture]:  # fmt: skip
        """:raise UnsupportedFeature: QEMU would write the pcap on the hypervisor's host."""
        raise self._unsupported(Capability.NETWORK_CAPTURE)

    def active_captures(self) -> list[NetworkCapture]:
        """None: this backend cannot capture."""
        return []

    async def aexport_disk(
        self, path: str | Path, format: DiskFormat = "raw", *,
        qga: FreezeAgent | None = None, flush: Flush | None = None,
    ) -> DiskExport:  # fmt: skip
        """The overlay volume (read here: local hypervisors only) quiesced and paused, to
        ``path``. :raise UnsupportedFeature: on a remote hypervisor."""
        if Capability.DISK_EXPORT not in self.capabilities:
            raise self._unsupported(Capability.DISK_EXPORT)
        return await export_disk(self, path, format=format, qga=qga, flush=flush)

    async def aset_link(self, up: bool, *, nic: str | None = None) -> None:
        """Set a LAN NIC's link up or down (``nic``: ``lan0``, ...; by default the first):
        its ``<interface>`` with ``<link state=.../>`` through ``virDomainUpdateDeviceFlags``
        on the live domain; the guest sees the carrier change.

        :raise UnsupportedFeature: the domain has no LAN NIC (the user-mode NIC's link
            is not set here). :raise ValueError: no such LAN NIC.
        :raise MachineCommandError: libvirt refused.
        """
        if not self.lan_ports:
            raise self._unsupported(Capability.LINK)
        ports = {port.netdev: port for port in self.lan_ports}
        port = self.lan_ports[0] if nic is None else ports.get(nic)
        if port is None:
            raise ValueError(f"{self.name} has no LAN NIC {nic!r} (its LAN NICs: "
                             f"{', '.join(ports)})")  # fmt: skip
        self.check_alive()
        xml = lan_interface_xml(port, link_up=up)
        await self.bounded(asyncio.to_thread(self._update_device, xml, port.netdev), 30.0,
                           f"setting the link of {port.netdev}")  # fmt: skip

    def _update_device(self, xml: str, what: str) -> None:
        libvirt = libvirt_module()
        try:
            self._domain.updateDeviceFlags(xml, libvirt.VIR_DOMAIN_AFFECT_LIVE)
        except libvirt.libvirtError as exc:
            raise MachineCommandError(
                f"setting the link of {what} on {self.domain_name}: {error_text(exc)}",
                command="updateDeviceFlags",
            ) from None

    async def ahypervisor_version(self) -> str:
        """The domain's QEMU, ``major.minor.micro (package)`` (``query-version``)."""
        answer: dict[str, Any] = await self._aqmp("query-version")
        numbers = answer.get("qemu", {})
        package = str(answer.get("package", "")).strip()
        version = f"{numbers.get('major')}.{numbers.get('minor')}.{numbers.get('micro')}"
        return f"{version} ({package})" if package else version

    def keep_hint(self, sockets: Path, loadvm: str | None) -> str:
        """:raise UnsupportedFeature: the overlay is a volume that goes with the domain."""
        raise self._unsupported(Capability.KEEP)


READ_SCREEN = 1 << 20
DOWNLOAD_CHUNK = 1 << 20


def _to_png(data: bytes) -> bytes:
    with Image.open(io.BytesIO(data)) as image:
        out = io.BytesIO()
        image.convert("RGB").save(out, "PNG", compress_level=1)
        return out.getvalue()


def libvirt_machine_factory(uri: str, agent_serial_device: str | None) -> MachineFactory:
    """A VM ``machine_factory`` making :class:`LibvirtMachine` s on ``uri``."""

    def make(manifest: MachineImage, workdir: Path, spec: MachineSpec) -> MachineBackend:
        return LibvirtMachine(
            manifest, workdir, spec, uri=uri, agent_serial_device=agent_serial_device
        )

    return make
