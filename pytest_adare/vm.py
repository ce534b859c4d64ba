"""``VM``: one Machine, its agent, and a connected :class:`~pytest_adare.guest.Guest`.

``start()`` runs the phases (:mod:`pytest_adare.vm_phases`, one module each) and reports
each as one progress line with its time: ``bundle`` (host-side agent bundle, cached),
``qemu`` (overlay + QEMU + QMP), then either ``boot`` (built-in images: the init starts
the agent with the config handed over in the initrd or by fw_cfg) or ``qga`` + ``install``
(any image with qemu-ga) or ``cloud-init``, ``connect`` (WebSocket handshake + ``connect``
answer, or the serial link), the readiness checks (``settle``, ``desktop``) and ``gui``.
When the connection cannot be made, the guest is diagnosed and :class:`AgentUnreachable`
says why. A saved ready state that fits replaces the boot (``warm``).

:class:`AsyncVM` is the async core: those phases composed over the VM's parts, one
:class:`~pytest_adare.vm_phases.state.VMState`. :class:`VM` holds that core (``aio``) and
shows what a test uses (the guest, the machine, the phases, the options, …), every
method a ``sync_twin`` of the core's; the parts are ``vm.state``.

Snapshots: :meth:`AsyncVM.save_ready` / :meth:`AsyncVM.restore_ready` close the agent
connection first and reconnect after (a WebSocket kept open across ``loadvm`` hangs).

A VM is configured by one frozen :class:`~pytest_adare.vm_options.VMOptions`;
:meth:`AsyncVM.reboot` is the one way to start a VM again (same object, fresh disk).

Its parts are made through three seams whose defaults are the real ones (unit tests
pass fakes): ``machine_factory`` (the options' backend's, chosen by name from
:mod:`pytest_adare.machine.registry`: QEMU's :class:`~pytest_adare.qemu.machine.Machine`
unless told otherwise; each machine is given the VM's
:class:`~pytest_adare.machine.spec.MachineSpec`), ``qga_factory`` (the QGA client on the
machine's ``qga_path``) and ``connector`` (opens the agent connection).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import tempfile
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_adare.analysis.target import open_target
from pytest_adare.forensics.diff import FsDiff
from pytest_adare.guest import Guest
from pytest_adare.image.agent_bundle import AgentBundle
from pytest_adare.image.manifest import ImageManifest
from pytest_adare.loop_thread import SyncTwin, sync_context_twin, sync_twin
from pytest_adare.machine.base import Capability, MachineBackend, MachineFactory, require
from pytest_adare.machine.results import (
    CAPTURE_MAX_BYTES,
    CAPTURE_SNAPLEN,
    DUMP_TIMEOUT,
    DiskFormat,
    DumpFormat,
    NetworkCapture,
)
from pytest_adare.machine_tools.qga import AsyncQGAClient
from pytest_adare.vm_options import READY_TAG, VMOptions
from pytest_adare.vm_phases import evidence
from pytest_adare.vm_phases.bundle import build_bundle
from pytest_adare.vm_phases.connect import close_links, disconnect, first_connect, reconnect
from pytest_adare.vm_phases.delivery import deliver
from pytest_adare.vm_phases.gui import pick_gui
from pytest_adare.vm_phases.handoff import (
    AGENT_STARTED,
    BootInputs,
    await_boot,
    boot_inputs,
    cloud_init_seed,
)
from pytest_adare.vm_phases.hypervisor import cold_start, stop_machine
from pytest_adare.vm_phases.install import install
from pytest_adare.vm_phases.ports import forward_ports
from pytest_adare.vm_phases.readiness import settle
from pytest_adare.vm_phases.share import build_shares, mount_shares
from pytest_adare.vm_phases.state import (
    Connector,
    GuiChoice,
    Phase,
    Progress,
    QGAFactory,
    VMState,
)
from pytest_adare.vm_phases.warm import save_warm, warm_plan, warm_start

if TYPE_CHECKING:  # PIL is imported by the machine, on the first screendump
    from PIL import Image

__all__ = ["AGENT_STARTED", "VM", "AsyncVM", "Connector", "GuiChoice", "Phase", "QGAFactory"]

CLOSE_TIMEOUT = 30.0
"""Bound on closing the agent connection and the QGA client before QEMU is stopped."""


class AsyncVM:
    """The async core of one VM: the phases of :mod:`pytest_adare.vm_phases` over
    ``state``, the parts the VM is made of (the sync :class:`VM` holds this core)."""

    def __init__(self, state: VMState) -> None:
        self.state = state

    # -- start-up -------------------------------------------------------------------------

    async def start(self, progress: Progress | None = None) -> None:
        """Boot, get the agent running, connect; one progress line per phase.

        :raise VMLaunchError: QEMU could not start.
        :raise VMTimeout: the guest or its agent did not come up in time.
        :raise VMDied: QEMU exited or the guest stopped while starting.
        :raise AgentUnreachable: the agent could not be connected (the message says why).
        """
        vm = self.state
        vm.report_to(progress)
        vm.phases.clear()
        bundle = await build_bundle(vm)
        plan = await warm_plan(vm, bundle)
        if plan.saved is not None and await warm_start(vm, plan.saved):
            await forward_ports(vm)
            return
        inputs = await asyncio.to_thread(boot_inputs, vm, bundle)
        seed = await asyncio.to_thread(cloud_init_seed, vm, bundle)
        share_disks = await build_shares(vm)
        await cold_start(vm, inputs.image, inputs.fw_cfg, seed=seed, share_disks=share_disks)
        await self._bring_up(inputs, bundle, seed)
        if plan.key is not None:
            await save_warm(vm, plan.key, inputs)
        await forward_ports(vm)
        await mount_shares(vm)

    async def _bring_up(self, inputs: BootInputs, bundle: AgentBundle, seed: Path | None) -> None:
        """After QEMU started: the agent up (handed over in ``inputs``, started by
        cloud-init from ``seed``, or ``bundle`` installed), connected, the guest ready,
        the screen chosen."""
        vm = self.state
        t = time.monotonic()
        if vm.handoff:
            await await_boot(vm, inputs)
        elif await deliver(vm, seed) == "cloud-init":
            vm.record("cloud-init", t, "the agent was started by cloud-init from the "
                      "cidata seed, listening")  # fmt: skip
        else:
            await install(vm, bundle, t)
        await first_connect(vm)
        await settle(vm)
        await pick_gui(vm)

    # -- snapshots and reboot ----------------------------------------------------------

    async def reconnect(self) -> None:
        """Close the agent connection and connect again (diagnosed when that fails).

        :raise VMDied: the machine is not running (with the reason and the console tail).
        """
        self.state.machine.check_alive()
        await disconnect(self.state)
        await reconnect(self.state)

    async def save_ready(self, tag: str = READY_TAG) -> None:
        """Save the VM (RAM, devices, disk) as its ready state; the agent reconnects after.

        :raise VMDied: the machine is not running, or died meanwhile.
        """
        self.state.machine.check_alive()
        await disconnect(self.state)
        await self.state.machine.asavevm(tag)
        await reconnect(self.state)

    async def restore_ready(self, tag: str = READY_TAG) -> None:
        """Return to the saved ready state (disconnect, ``loadvm``, reconnect); each
        step's seconds go to ``last_restore``.

        :raise VMDied: the machine is not running, or died meanwhile.
        """
        vm = self.state
        vm.machine.check_alive()
        steps: dict[str, float] = {}
        t = time.monotonic()
        await disconnect(vm)
        steps["disconnect"], t = time.monotonic() - t, time.monotonic()
        await vm.machine.aloadvm(tag)
        steps["loadvm"], t = time.monotonic() - t, time.monotonic()
        await reconnect(vm)
        steps["reconnect"] = time.monotonic() - t
        vm.last_restore = steps

    async def reboot(self, progress: Progress | None = None) -> None:
        """Boot the guest again from a fresh overlay (a clean disk) and reconnect.

        QEMU runs with ``-no-reboot`` (a guest crash must end it), so a reset would stop
        it: the VM restarts QEMU instead, with the same token and options. Saved
        snapshots live in the overlay and are gone afterwards.
        """
        vm = self.state
        await self._close_parts()
        await stop_machine(vm)
        vm.drop_machine()
        await self.start(progress if progress is not None else vm.progress)

    # -- evidence ---------------------------------------------------------------------------

    async def screendump(self) -> Image.Image:
        """The guest display as the hypervisor sees it (no agent needed)."""
        return await self.state.machine.ascreendump()

    async def wait_for_console(self, pattern: str | re.Pattern[str], timeout: float = 60.0) -> str:
        """Wait until a line of the guest's console (the serial console the kernel and
        init write to) matches ``pattern`` (a regex, ``search`` semantics); returns that
        line. Lines still in the console ring count, so output from before the call
        matches too.

        :raise VMTimeout: nothing matched within ``timeout`` s (with the console's last lines).
        :raise VMDied: QEMU exited or the guest panicked first.
        """
        return (await self.state.machine.await_for_console(pattern, timeout)).string

    async def agent_log_tail(self, n: int = 40) -> list[str]:
        """The last ``n`` lines of the agent's log: via the agent, else via QGA."""
        return await evidence.agent_log_tail(self.state, n)

    def network_capture(
        self, path: str | Path, *, snaplen: int = CAPTURE_SNAPLEN,
        max_bytes: int = CAPTURE_MAX_BYTES, nic: str | None = None,
    ) -> AbstractAsyncContextManager[NetworkCapture]:  # fmt: skip
        """``with vm.network_capture("net.pcap") as cap:`` the guest's traffic as pcap:
        one NIC's, ``nic`` (``net0``, ``lan0``, ...), by default the user-mode NIC, else
        the first LAN NIC."""
        require(self.state.machine, Capability.NETWORK_CAPTURE)
        return self.state.machine.network_capture(
            path, snaplen=snaplen, max_bytes=max_bytes, nic=nic
        )

    async def dump_memory(
        self, path: str | Path, format: DumpFormat = "elf", *, resume: bool = True,
        timeout: float = DUMP_TIMEOUT,
    ) -> Path:  # fmt: skip
        """The guest's RAM to ``path`` (paused; resumed after unless ``resume=False``)."""
        require(self.state.machine, Capability.MEMORY_DUMP)
        return await evidence.dump_memory(self.state, path, format, resume, timeout)

    async def export_disk(self, path: str | Path, format: DiskFormat = "raw") -> Path:
        """The guest's disk now (file systems frozen by qemu-ga, else synced) to ``path``."""
        require(self.state.machine, Capability.DISK_EXPORT)
        return await evidence.export_disk(self.state, path, format)

    @contextlib.asynccontextmanager
    async def disk_target(self, path: str | Path | None = None) -> AsyncIterator[Any]:
        """``with vm.disk_target() as target:`` a read-only ``dissect.target.Target`` over
        the disk now (:meth:`export_disk`, raw; the ``analysis`` extra). The export is
        ``path`` when given (kept, to open again after the VM stops with
        :func:`~pytest_adare.analysis.open_target`), else a temporary file removed after."""
        with tempfile.TemporaryDirectory(prefix="adare-disk-") as scratch:
            disk = await self.export_disk(path if path is not None else Path(scratch) / "disk.raw")
            yield await asyncio.to_thread(open_target, disk)

    async def resume(self) -> None:
        """Let a guest paused by ``dump_memory(..., resume=False)`` run again."""
        await self.state.machine.aresume()

    async def collect_evidence(
        self, dest: str | Path, memory: bool = True, disk: bool = True, pcap: bool = True,
        fs_diff: FsDiff | None = None, *, test_id: str | None = None,
    ) -> dict[str, Any]:  # fmt: skip
        """Pause once, take RAM (ELF), disk (raw) and the running captures' pcap into
        ``dest``, resume; writes ``dest/manifest.json`` (+ CASE ``manifest.jsonld``).
        Returns the manifest; see :mod:`pytest_adare.forensics.evidence_bundle`."""
        return await evidence.collect_evidence(
            self.state, Path(dest), memory=memory, disk=disk, pcap=pcap, fs_diff=fs_diff,
            test_id=test_id,
        )  # fmt: skip

    # -- shutdown -----------------------------------------------------------------------------

    async def close(self) -> None:
        """Disconnect and stop QEMU; safe to call more than once."""
        await self._close_parts()
        await stop_machine(self.state)

    async def _close_parts(self) -> None:
        """Close the agent connection and the QGA client (bounded; errors swallowed:
        QEMU is stopped next either way)."""

        with contextlib.suppress(Exception):
            await asyncio.wait_for(close_links(self.state), CLOSE_TIMEOUT)


class VM(SyncTwin[AsyncVM]):
    """One guest VM with its agent connected; see the module docstring for the phases.

    ``aio`` is its async core, which holds the parts the VM is made of (``state``, a
    :class:`~pytest_adare.vm_phases.state.VMState`); the VM's own surface is what a test
    calls: the guest, the machine, the recorded phases, snapshots, reboot, evidence."""

    def __init__(
        self,
        manifest: ImageManifest,
        workdir: Path,
        options: VMOptions | None = None,
        *,
        name: str = "vm",
        config_overrides: Mapping[str, Any] | None = None,
        machine_factory: MachineFactory | None = None,
        qga_factory: QGAFactory = AsyncQGAClient,
        connector: Connector | None = None,
    ) -> None:
        """``machine_factory``, ``qga_factory``, ``connector``: see the module docstring
        (the default factory is the options' backend's, :mod:`pytest_adare.machine.registry`);
        the default connector is :func:`pytest_adare.vm_phases.connect.open_transport`.

        :raise ValueError: an unknown backend, or an option it cannot honour."""
        state = VMState(
            manifest, workdir, options, name=name, config_overrides=config_overrides,
            machine_factory=machine_factory, qga_factory=qga_factory, connector=connector,
        )  # fmt: skip
        self.aio = AsyncVM(state)

    @property
    def state(self) -> VMState:
        """The parts this VM is made of and what its phases share: what a phase is
        called with (``interactive/`` hands it to the warm start and the reconnect)."""
        return self.aio.state

    @property
    def name(self) -> str:
        """The VM's name in progress lines and messages."""
        return self.state.name

    @property
    def manifest(self) -> ImageManifest:
        """The image this VM boots."""
        return self.state.manifest

    @property
    def workdir(self) -> Path:
        """Where its overlay, console log and hand-off files are."""
        return self.state.workdir

    @property
    def options(self) -> VMOptions:
        """The options it was made with."""
        return self.state.options

    @property
    def phases(self) -> list[Phase]:
        """The phases of the last start, in order (see the module docstring)."""
        return self.state.phases

    @property
    def guest(self) -> Guest:
        """The connected guest facade. :raise AdareError: before ``start``."""
        return self.state.guest

    @property
    def machine(self) -> MachineBackend:
        """The machine (a :class:`~pytest_adare.machine.base.MachineBackend`).

        :raise AdareError: before ``start``."""
        return self.state.machine

    @property
    def qga(self) -> AsyncQGAClient:
        """The QGA client of this VM (async; created on first use)."""
        return self.state.qga

    @property
    def token(self) -> str:
        """The per-VM bearer token the agent accepts."""
        return self.state.token

    @property
    def transport(self) -> str:
        """How the host reaches the agent: ``websocket`` or ``serial``."""
        return self.state.transport

    @property
    def gui(self) -> str:
        """Where screenshots and input go: ``agent`` or ``host`` (QEMU); with
        ``gui="auto"`` what was chosen at start (``auto`` before that)."""
        return self.state.gui

    @property
    def gui_choice(self) -> GuiChoice | None:
        """The GUI mode chosen at start and why (None before ``start``)."""
        return self.state.gui_choice

    @property
    def firmware(self) -> str:
        """``bios`` or ``uefi``: the option when given, else the manifest's."""
        return self.state.firmware

    @property
    def firmware_reason(self) -> str:
        """One line, e.g. ``firmware: uefi (detected: GPT with an EFI system partition …)``."""
        return self.state.firmware_reason

    @property
    def ready_command(self) -> str | None:
        """The user's readiness command: the options', else the manifest's, else None."""
        return self.state.ready_command

    @property
    def last_restore(self) -> dict[str, float]:
        """Seconds each step of the last ``restore_ready`` took: ``disconnect``,
        ``loadvm``, ``reconnect`` (empty before the first)."""
        return self.state.last_restore

    def console_tail(self, n: int = 40) -> list[str]:
        """The last ``n`` console lines."""
        return self.state.machine.console_tail(n)

    _start = sync_twin(AsyncVM.start)

    def start(self, progress: Progress | None = None) -> VM:
        """Boot, get the agent running, connect (:meth:`AsyncVM.start`); returns the VM,
        so ``vm = VM(...).start()`` and ``with VM(...) as vm:`` read naturally.

        :raise VMLaunchError: QEMU could not start.
        :raise VMTimeout: the guest or its agent did not come up in time.
        :raise VMDied: QEMU exited or the guest stopped while starting.
        :raise AgentUnreachable: the agent could not be connected (the message says why).
        """
        self._start(progress)
        return self

    reconnect = sync_twin(AsyncVM.reconnect)
    save_ready = sync_twin(AsyncVM.save_ready)
    restore_ready = sync_twin(AsyncVM.restore_ready)
    reboot = sync_twin(AsyncVM.reboot)
    screendump = sync_twin(AsyncVM.screendump)
    wait_for_console = sync_twin(AsyncVM.wait_for_console)
    agent_log_tail = sync_twin(AsyncVM.agent_log_tail)
    network_capture = sync_context_twin(AsyncVM.network_capture)
    dump_memory = sync_twin(AsyncVM.dump_memory)
    export_disk = sync_twin(AsyncVM.export_disk)
    disk_target = sync_context_twin(AsyncVM.disk_target)
    resume = sync_twin(AsyncVM.resume)
    collect_evidence = sync_twin(AsyncVM.collect_evidence)
    close = sync_twin(AsyncVM.close)

    def __enter__(self) -> VM:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()
