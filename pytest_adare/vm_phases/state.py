"""``VMState``: what one VM is made of and what its phases share.

A ``VM`` holds one (``vm.state``) and shows the part of it a test uses. Its public
attributes are the VM's configuration and the seams its parts are made through;
attributes starting with ``_`` are the parts made at start (the machine, the QGA client,
the guest facade), the progress callback and the GUI choice: only ``vm.py`` and the
modules of :mod:`pytest_adare.vm_phases` set them. What one phase makes for a later one
(the bundle, the boot inputs, the seed, the share disks) is no state: it is returned and
handed on (``AsyncVM.start``).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_adare.agent.connection import AgentConnection
from pytest_adare.agent.install import GuestLayout, agent_config, new_token, uses_boot_handoff
from pytest_adare.errors import AdareError
from pytest_adare.guest import Guest
from pytest_adare.image.manifest import ImageManifest
from pytest_adare.machine.base import MachineBackend, MachineFactory
from pytest_adare.machine.registry import backend_for
from pytest_adare.machine.spec import AgentLink
from pytest_adare.machine_tools.port_forward import PortForwards
from pytest_adare.machine_tools.qga import AsyncQGAClient
from pytest_adare.vm_options import VMOptions

Progress = Callable[[str], None]
QGAFactory = Callable[[Path], AsyncQGAClient]
"""Makes the QGA client for the machine's ``qga_path``."""
Connector = Callable[["VMState", str], Awaitable[AgentConnection]]
"""Opens the agent connection of a started VM with a bearer token (:raise
AgentUnreachable: when it cannot)."""


def agent_link_for(serial_device: str | None) -> AgentLink:
    """What carries the agent's serial link for the guest device it serves: a
    ``/dev/virtio-ports/…`` device a virtio-serial port, anything else the UART."""
    return "virtio" if (serial_device or "").startswith("/dev/virtio-ports/") else "uart"


@dataclass(frozen=True)
class Phase:
    """One start-up phase: its name, how long it took, and what happened."""

    name: str
    seconds: float
    detail: str = ""

    def line(self) -> str:
        """The progress line, e.g. ``connect: websocket 127.0.0.1:40123 (0.21 s)``."""
        detail = f"{self.detail} " if self.detail else ""
        return f"{self.name}: {detail}({self.seconds:.2f} s)"


@dataclass(frozen=True)
class GuiChoice:
    """Where a VM's screenshots and input go (``agent`` or ``host``) and why."""

    mode: str
    reason: str

    def describe(self) -> str:
        """One line, e.g. ``host (the image has no desktop: QEMU's screendump and input)``."""
        return f"{self.mode} ({self.reason})"


class VMState:
    """One VM's configuration, parts and recorded phases (see the module docstring)."""

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
        """``machine_factory``, ``qga_factory``, ``connector``: see :mod:`pytest_adare.vm`
        (the default factory is the options' backend's); the default connector is
        :func:`pytest_adare.vm_phases.connect.open_transport`.

        :raise ValueError: an unknown backend, or an option it cannot honour."""
        self.manifest = manifest
        self.workdir = Path(workdir)
        self.options = options or VMOptions()
        self.name = name
        self.token = new_token()
        self.layout = GuestLayout.for_manifest(manifest)
        self.agent_config = agent_config(self.layout, self.token, config_overrides)
        self.custom_config = bool(config_overrides)
        # The agent's serial link rides a virtio-serial port when the image's agent
        # serves one (megabytes per second), else the UART ttyS1 (~250 KiB/s under TCG).
        self.agent_link = agent_link_for(self.layout.serial_device)
        self.handoff = self.options.install == "auto" and uses_boot_handoff(manifest)
        self.backend = backend_for(self.options)
        """The registered backend the options choose (:mod:`pytest_adare.machine.registry`);
        what it can do decides warm start, forwarded ports and shares, never its name."""
        if machine_factory is None:
            machine_factory = self.backend.machine_factory(self.options, self.layout.serial_device)
        self.new_machine = machine_factory
        self.new_qga = qga_factory
        self.connector = connector
        self.phases: list[Phase] = []
        self.forwards = PortForwards()
        """The guest ports forwarded from the host (``ports`` and ``guest.forward``)."""
        self.last_restore: dict[str, float] = {}
        """Seconds each step of the last ``restore_ready`` took: ``disconnect``,
        ``loadvm``, ``reconnect`` (empty before the first)."""
        self._machine: MachineBackend | None = None
        self._qga: AsyncQGAClient | None = None
        self._guest: Guest | None = None
        self._progress: Progress | None = None
        self._gui_choice: GuiChoice | None = None

    @property
    def transport(self) -> str:
        """How the host reaches the agent: ``websocket`` or ``serial``."""
        return self.options.transport

    @property
    def gui(self) -> str:
        """Where screenshots and input go: ``agent`` or ``host`` (QEMU); with
        ``gui="auto"`` what was chosen at start (``auto`` before that)."""
        return self._gui_choice.mode if self._gui_choice is not None else self.options.gui

    @property
    def gui_choice(self) -> GuiChoice | None:
        """The GUI mode chosen at start and why (None before ``start``)."""
        return self._gui_choice

    @property
    def firmware(self) -> str:
        """``bios`` or ``uefi``: the option when given, else the manifest's (for a bare disk
        read from its partition table)."""
        if self.options.firmware != "auto":
            return self.options.firmware
        return self.manifest.firmware

    @property
    def firmware_reason(self) -> str:
        """One line, e.g. ``firmware: uefi (detected: GPT with an EFI system partition …)``."""
        if self.manifest.kernel is not None:
            return "firmware: direct kernel boot"
        if self.options.firmware != "auto":
            return f"firmware: {self.firmware} (firmware={self.options.firmware!r} was asked for)"
        return f"firmware: {self.firmware} ({self.manifest.firmware_reason or 'the default'})"

    @property
    def ready_command(self) -> str | None:
        """The user's readiness command: the options', else the manifest's, else None."""
        return self.options.ready_command or self.manifest.ready_command

    @property
    def guest(self) -> Guest:
        """The connected guest facade. :raise AdareError: before ``start``."""
        if self._guest is None:
            raise AdareError(f"VM {self.name} has no agent connection (start() it first)")
        return self._guest

    @property
    def machine(self) -> MachineBackend:
        """The machine (a :class:`~pytest_adare.machine.base.MachineBackend`).

        :raise AdareError: before ``start``."""
        if self._machine is None:
            raise AdareError(f"VM {self.name} has no machine yet (start() it first)")
        return self._machine

    @property
    def qga(self) -> AsyncQGAClient:
        """The QGA client of this VM (async; created on first use)."""
        if self._qga is None:
            self._qga = self.new_qga(self.machine.qga_path)
        return self._qga

    # -- its parts: made by the phases, held here; each change through one method ----

    @property
    def current_machine(self) -> MachineBackend | None:
        """The machine, or None before a start and after a stop (:attr:`machine` raises)."""
        return self._machine

    @property
    def current_guest(self) -> Guest | None:
        """The guest facade, or None before the first connect (:attr:`guest` raises)."""
        return self._guest

    @property
    def current_qga(self) -> AsyncQGAClient | None:
        """The QGA client if one was made (:attr:`qga` makes one)."""
        return self._qga

    @property
    def progress(self) -> Progress | None:
        """Where progress lines go (the last ``start``'s), or None."""
        return self._progress

    def adopt_machine(self, machine: MachineBackend) -> MachineBackend:
        """Hold ``machine`` (before it starts, so a failed start is still shut down by
        ``close``); returns it."""
        self._machine = machine
        return machine

    def drop_machine(self) -> None:
        """The machine was stopped: forget it and its QGA client (its socket went with it)."""
        self._machine, self._qga = None, None

    def adopt_guest(self, guest: Guest) -> Guest:
        """Hold the guest facade the first connect made (later connects re-attach it, so
        a test's ``guest`` survives a reboot); returns it."""
        self._guest = guest
        return guest

    def choose_gui(self, choice: GuiChoice) -> GuiChoice:
        """Remember where screenshots and input go (:attr:`gui`); returns ``choice``."""
        self._gui_choice = choice
        return choice

    def report_to(self, progress: Progress | None) -> None:
        """Send this VM's progress lines to ``progress`` (None: nowhere)."""
        self._progress = progress

    def console_tail(self, n: int = 40) -> list[str]:
        """The last ``n`` console lines."""
        return self.machine.console_tail(n)

    def say(self, line: str) -> None:
        """One progress line, prefixed with the VM's name."""
        if self._progress is not None:
            self._progress(f"{self.name} {line}")

    def record(self, name: str, started: float, detail: str = "") -> None:
        """Record the phase ``name`` that began at ``started`` (monotonic) and say it."""
        phase = Phase(name, time.monotonic() - started, detail)
        self.phases.append(phase)
        self.say(phase.line())
