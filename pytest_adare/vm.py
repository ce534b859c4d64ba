"""``VM``: one Machine, its agent, and a connected :class:`~pytest_adare.guest.Guest`.

``start()`` runs the phases and reports each as one progress line with its time:
``bundle`` (host-side agent bundle, cached), ``qemu`` (overlay + QEMU + QMP), then
either ``boot`` (built-in images: the init starts the agent with the config handed
over in the initrd or by fw_cfg) or ``qga`` + ``install`` (any image with qemu-ga), and ``connect``
(WebSocket handshake + ``connect`` answer, or the serial link). When the connection
cannot be made, the guest is diagnosed and :class:`AgentUnreachable` says why.

Snapshots: :meth:`save_ready` / :meth:`restore_ready` close the agent connection
first and reconnect after (a WebSocket kept open across ``loadvm`` hangs).

A VM is configured by one frozen :class:`~pytest_adare.vm_options.VMOptions`;
:meth:`reboot` is the one way to start a VM again (same object, fresh disk).

Its parts are made through three seams whose defaults are the real ones (unit tests
pass fakes): ``machine_factory`` (the :class:`Machine`), ``qga_factory`` (the QGA client
on the machine's ``qga_path``) and ``connector`` (opens the agent connection).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import os
import re
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

from PIL import Image

from adare_guest.config import DEFAULT_PORT
from pytest_adare.agent.cloud_init import write_seed
from pytest_adare.agent.connection import AgentConnection
from pytest_adare.agent.delivery import Channel, await_delivery
from pytest_adare.agent.desktop_ready import await_focused_window
from pytest_adare.agent.diagnosis import AgentFacts, guest_facts, serial_health, unreachable
from pytest_adare.agent.install import (
    GuestLayout,
    agent_config,
    install_agent,
    new_token,
    prepare_boot_handoff,
    qga_run,
    uses_boot_handoff,
    uses_initrd_handoff,
)
from pytest_adare.agent.serial_client import SerialAgentClient
from pytest_adare.agent.websocket_client import AgentClient
from pytest_adare.errors import (
    AdareError,
    AgentDisconnected,
    AgentUnreachable,
    QGAError,
    ToolError,
    VMTimeout,
)
from pytest_adare.forensics.diff import FsDiff
from pytest_adare.forensics.evidence_bundle import BundleFacts, write_bundle
from pytest_adare.forensics.evidence_capture import capture_evidence
from pytest_adare.guest import AsyncGuest, Guest, tool_result
from pytest_adare.image.agent_bundle import AgentBundle, build_agent_bundle
from pytest_adare.image.manifest import ImageManifest
from pytest_adare.libvirt_backend.machine import libvirt_machine_factory
from pytest_adare.loop_thread import shared_loop
from pytest_adare.machine.base import (
    Capability,
    MachineBackend,
    MachineFactory,
    MachineImage,
    require,
)
from pytest_adare.machine.results import (
    CAPTURE_MAX_BYTES,
    CAPTURE_SNAPLEN,
    DUMP_TIMEOUT,
    DiskFormat,
    DumpFormat,
    NetworkCapture,
)
from pytest_adare.qemu.accel import choose_accel
from pytest_adare.qemu.argv import agent_link_for
from pytest_adare.qemu.machine import Machine
from pytest_adare.qemu.qga import AsyncQGAClient
from pytest_adare.qemu.saved_state import (
    SavedState,
    discard_state,
    find_state,
    save_machine_state,
    state_lock,
)
from pytest_adare.qemu.screen import QemuScreen
from pytest_adare.vm_options import READY_TAG, VMOptions
from pytest_adare.warm_start import (
    WarmPlan,
    boot_files,
    cold_only_reason,
    saved_boot_inputs,
    warm_plan,
)

T = TypeVar("T")
Progress = Callable[[str], None]
AGENT_STARTED = r"adare-init: agent started"
LISTEN_PROBE_TIMEOUT = 120.0
"""Bound on waiting for the agent to report (over serial) that it listens."""
LISTEN_PING_FIRST_TIMEOUT = 1.0
LISTEN_PING_MAX_TIMEOUT = 3.0


QGAFactory = Callable[[Path], AsyncQGAClient]
"""Makes the QGA client for the machine's ``qga_path``."""
Connector = Callable[["VM", str], Awaitable[AgentConnection]]
"""Opens the agent connection of a started VM with a bearer token (:raise
AgentUnreachable: when it cannot)."""


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


SETTLE_TIMEOUT = 180.0
"""Bound on ``systemctl is-system-running --wait`` before a systemd guest counts as ready."""
READY_TRY_TIMEOUT = 60.0
"""Bound on one run of the user's readiness command."""
READY_RETRY_PAUSE = 1.0
"""Seconds between two runs of the readiness command."""
GUI_PROBE_TIMEOUT = 60.0
"""Bound on the agent's first screenshot when ``gui="auto"`` asks whether its display works."""


class VM:
    """One guest VM with its agent connected; see the module docstring for the phases."""

    def __init__(
        self,
        manifest: ImageManifest,
        workdir: Path,
        options: VMOptions | None = None,
        *,
        name: str = "vm",
        config_overrides: Mapping[str, Any] | None = None,
        machine_factory: MachineFactory = Machine,
        qga_factory: QGAFactory = AsyncQGAClient,
        connector: Connector | None = None,
    ) -> None:
        """``machine_factory``, ``qga_factory``, ``connector``: see the module docstring;
        the default connector is :meth:`open_transport`."""
        self.manifest = manifest
        self.workdir = Path(workdir)
        self.options = options or VMOptions()
        self.name = name
        self.token = new_token()
        self.layout = GuestLayout.for_manifest(manifest)
        self.agent_config = agent_config(self.layout, self.token, config_overrides)
        self._custom_config = bool(config_overrides)
        # The agent's serial link rides a virtio-serial port when the image's agent
        # serves one (megabytes per second), else the UART ttyS1 (~250 KiB/s under TCG).
        self._agent_link = agent_link_for(self.layout.serial_device)
        self.handoff = self.options.install == "auto" and uses_boot_handoff(manifest)
        if self.options.hypervisor is not None and machine_factory is Machine:
            # The libvirt backend: the same phases, the guest a domain on that hypervisor.
            machine_factory = libvirt_machine_factory(
                self.options.hypervisor, self.layout.serial_device
            )
        self.phases: list[Phase] = []
        self.last_restore: dict[str, float] = {}
        """Seconds each step of the last :meth:`restore_ready` took: ``disconnect``,
        ``loadvm``, ``reconnect`` (empty before the first)."""
        self._machine: MachineBackend | None = None
        self._bundle: AgentBundle | None = None
        self._qga: AsyncQGAClient | None = None
        self._guest: Guest | None = None
        self._progress: Progress | None = None
        self._gui_choice: GuiChoice | None = None
        self._seed: Path | None = None
        self._new_machine = machine_factory
        self._new_qga = qga_factory
        self._connector: Connector = connector or VM.open_transport

    # -- public state -------------------------------------------------------------------

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
        """The GUI mode chosen at start and why (None before :meth:`start`)."""
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
    def guest(self) -> Guest:
        """The connected guest facade. :raise AdareError: before :meth:`start`."""
        if self._guest is None:
            raise AdareError(f"VM {self.name} has no agent connection (start() it first)")
        return self._guest

    @property
    def machine(self) -> MachineBackend:
        """The machine (a :class:`~pytest_adare.machine.base.MachineBackend`).

        :raise AdareError: before :meth:`start`."""
        if self._machine is None:
            raise AdareError(f"VM {self.name} has no machine yet (start() it first)")
        return self._machine

    @property
    def qga(self) -> AsyncQGAClient:
        """The QGA client of this VM (async; created on first use)."""
        if self._qga is None:
            self._qga = self._new_qga(self.machine.qga_path)
        return self._qga

    def _run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        return shared_loop().run(coro, timeout)

    def _phase(self, name: str, started: float, detail: str = "") -> None:
        phase = Phase(name, time.monotonic() - started, detail)
        self.phases.append(phase)
        if self._progress is not None:
            self._progress(f"{self.name} {phase.line()}")

    # -- start-up -------------------------------------------------------------------------

    def start(self, progress: Progress | None = None) -> VM:
        """Boot, get the agent running, connect; one progress line per phase.

        :raise VMLaunchError: QEMU could not start.
        :raise VMTimeout: the guest or its agent did not come up in time.
        :raise VMDied: QEMU exited or the guest stopped while starting.
        :raise AgentUnreachable: the agent could not be connected (the message says why).
        """
        self._progress = progress
        self.phases.clear()
        t = time.monotonic()
        # pyautogui and its helpers go into the bundle only when the agent drives the GUI.
        self._bundle = build_agent_bundle(gui=self.manifest.desktop and self.gui != "host")
        self._phase("bundle", t, f"{self._bundle.version} {self._bundle.bundle_hash[:12]}")
        warm = self._warm_plan()
        if warm.saved is not None and self._warm_start(warm.saved):
            return self
        entries: dict[str, Path] = {}
        hand_off = ""
        booted = self.manifest
        if self.handoff:
            handoff = prepare_boot_handoff(
                self.manifest, self.workdir, self.agent_config, self._bundle
            )
            entries, hand_off = handoff.fw_cfg, handoff.describe()
            if handoff.initrd is not None:
                booted = replace(self.manifest, initrd=handoff.initrd)
        seed = self._seed = self._cloud_init_seed()
        t = time.monotonic()
        self._machine = self._make_machine(
            booted, entries, firmware=self.firmware, seed=seed, rtc_base=self.options.rtc_base
        )
        self.machine.start()
        accel = self.machine.accel_reason or f"accel {self.machine.accel}"
        self._phase("qemu", t, f"{accel}; {self.firmware_reason}; {self._link_line()}")
        self._run(self._aready(hand_off))
        if warm.key is not None:
            self._save_warm(warm.key, booted.initrd, entries)
        return self

    # -- warm start -----------------------------------------------------------------------
    #
    # A warm start loads the ready state the first cold boot of the same combination saved
    # (pytest_adare.warm_start says which and why): QEMU starts waiting for it, loads it,
    # and the guest runs on from the moment it was saved, with its agent still holding the
    # saving VM's token. So the host connects once with that token, installs its own
    # (``rekey``) and sets the guest clock from the host's (hours may have passed). Any
    # failure discards that state and boots cold, which saves a new one.

    def _make_machine(
        self, image: MachineImage, fw_cfg: Mapping[str, Path], **extra: Any
    ) -> MachineBackend:
        """This VM's (unstarted) machine for ``image``: what every start shares, plus
        ``extra`` (the cold boot's firmware, seed and clock; the warm start's ``incoming``)."""
        return self._new_machine(
            image,
            self.workdir,
            memory_mib=self.options.memory_mib,
            cpus=self.options.cpus,
            accel=self.options.accel,
            network=self.options.network,
            fw_cfg=fw_cfg,
            name=self.name,
            agent_link=self._agent_link,
            **extra,
        )

    def _link_line(self) -> str:
        if not self.layout.serial_device:
            return "no agent serial link"
        carrier = "virtio-serial" if self._agent_link == "virtio" else "the UART"
        return f"agent serial link on {carrier} ({self.layout.serial_device})"

    def _warm_plan(self) -> WarmPlan:
        assert self._bundle is not None
        reason = cold_only_reason(self.manifest, self.options, self._custom_config)
        if reason is not None:  # no key to compute, so no accelerator to choose either
            plan = WarmPlan(None, None, reason)
        else:
            route = "initrd" if uses_initrd_handoff(self.manifest) else "fw_cfg"
            plan = warm_plan(
                self.manifest,
                self.options,
                accel=choose_accel(self.options.accel, probe_kernel=self.manifest.kernel),
                bundle_hash=self._bundle.bundle_hash,
                run_dir=str(self.layout.run_dir),
                handoff=route if self.handoff else "none",
                ready_command=self.ready_command,
            )
        if self._progress is not None:
            self._progress(f"{self.name} warm: {plan.reason}")
        return plan

    def _warm_start(self, saved: SavedState) -> bool:
        """Start from ``saved``; False (after one line saying why) when that failed."""
        t = time.monotonic()
        initrd, fw_cfg = saved_boot_inputs(saved)
        booted = replace(self.manifest, disk=saved.disk, format="qcow2", initrd=initrd)
        try:
            self._machine = self._make_machine(booted, fw_cfg, incoming=True)
            self.machine.start()
            boot_lines = saved.meta.get("console_tail", "")
            self.machine.seed_console(
                f"{boot_lines}\n[adare: warm start; the lines above are the saved boot's]\n"
            )
            self._run(self._awarm_ready(saved, t))
        except (AdareError, OSError) as error:
            first = str(error).splitlines()[0] if str(error) else type(error).__name__
            if self._progress is not None:
                self._progress(f"{self.name} warm: start failed ({first}); booting cold")
            discard_state(saved)
            with contextlib.suppress(Exception):
                self._run(self._aclose(), timeout=30)
            if self._machine is not None:
                self._machine.shutdown()
            self._machine, self._qga = None, None
            self.phases.clear()
            return False
        return True

    async def _awarm_ready(self, saved: SavedState, started: float) -> None:
        await self.machine.aload_state(saved.state, self.options.boot_timeout)
        self._phase("warm", started, f"ready state {saved.key[:12]} loaded")
        t = time.monotonic()
        connection = await self._aconnect(saved.meta["agent_token"])
        tool_result("rekey", await connection.call("rekey", {"token": self.token}, 30.0))
        # Every VM loaded from this state has the saved kernel RNG state: reseed it from
        # the host, so two of them do not draw the same "random" numbers.
        seed = base64.b64encode(os.urandom(64)).decode("ascii")
        seeded = await connection.call("seed_random", {"data": seed}, 30.0)
        reseeded = (
            "RNG reseeded" if seeded.get("status") == "success"
            else f"RNG not reseeded ({str(seeded.get('error'))[:100]})"
        )  # fmt: skip
        guest = self._attach(connection)
        if self.layout.os == "windows":
            await guest.aio.set_time(datetime.now(timezone.utc))
        else:  # the system clock only: hwclock -w would wait for the RTC's next second
            await guest.aio.shell(f"date -u -s @{time.time():.6f} >/dev/null", timeout=30)
        self._phase("connect", t, f"{self.transport}, agent re-keyed, {reseeded}, guest clock set")
        await self._apick_gui()

    def _save_warm(self, key: str, initrd: Path | None, fw_cfg: Mapping[str, Path]) -> None:
        """Save this freshly booted VM's ready state for later VMs (once per key)."""
        t = time.monotonic()
        try:
            with state_lock(key):
                if find_state(key) is not None:
                    detail = f"ready state {key[:12]} was saved meanwhile by another VM"
                else:
                    self._run(self._asave_warm(key, initrd, fw_cfg))
                    detail = f"ready state {key[:12]} saved for later VMs"
        except (AdareError, OSError) as error:
            detail = f"ready state not saved: {str(error).splitlines()[0]}"
        self._phase("warm-save", t, detail)

    async def _asave_warm(self, key: str, initrd: Path | None, fw_cfg: Mapping[str, Path]) -> None:
        files, names = boot_files(initrd, fw_cfg)
        await self._adisconnect()
        try:
            await save_machine_state(
                self.machine,
                key,
                files,
                {
                    "agent_token": self.token,
                    "fw_cfg": names,
                    "console_tail": "\n".join(self.machine.console_tail(200)),
                },
            )
        finally:
            await self.machine.aresume()
            await self._areconnect()

    async def _aready(self, hand_off: str) -> None:
        """Bring the agent up after QEMU started (boot or install), then connect."""
        t = time.monotonic()
        if self.handoff:
            await self.machine.await_for_console(AGENT_STARTED, self.options.boot_timeout)
            listening = await self._await_listening(LISTEN_PROBE_TIMEOUT)
            self._phase("boot", t, f"agent started by the guest's init ({hand_off})"
                        f"{', listening' if listening else ''}")  # fmt: skip
        elif await self._await_delivery() == "cloud-init":
            self._phase("cloud-init", t, "the agent was started by cloud-init from the "
                        "cidata seed, listening")  # fmt: skip
        else:
            self._phase("qga", t, "qemu-ga answers")
            t = time.monotonic()
            assert self._bundle is not None
            report = await install_agent(
                self.qga, self.layout, self._bundle, self.agent_config, progress=self._progress
            )
            listening = await self._await_listening(LISTEN_PROBE_TIMEOUT / 2)
            self._phase("install", t, report.describe() + (", listening" if listening else ""))
        t = time.monotonic()
        connection = await self._aconnect()
        guest = self._attach(connection)
        info = connection.server_info
        self._phase("connect", t, f"{self.transport}, agent {info.get('version', '?')}")
        if self.ready_command is not None:
            await self._await_ready_command(guest, self.ready_command)
        elif not self.handoff:
            await self._await_system_running(guest)
        if self.manifest.desktop:
            t = time.monotonic()
            focused = await await_focused_window(
                guest.aio,
                self.options.desktop_timeout,
                console_tail=self.machine.console_tail(20),
            )
            self._phase("desktop", t, f"{focused} has the keyboard focus")
        await self._apick_gui()

    def _attach(self, connection: AgentConnection) -> Guest:
        """The guest facade on ``connection`` (a restarted machine keeps the same facade)."""
        screen = None if self.options.gui == "agent" else self._host_screen()
        if self._guest is None:
            self._guest = Guest(
                AsyncGuest(connection, screen=screen, agent_root=self.layout.run_dir)
            )
        else:
            self._guest.aio.attach(connection)
            self._guest.aio.use_screen(screen)
        return self._guest

    def _host_screen(self) -> QemuScreen:
        return QemuScreen(self.machine, self.manifest.display)

    async def _apick_gui(self) -> None:
        assert self._guest is not None
        t = time.monotonic()
        self._gui_choice = await self._choose_gui()
        agent = self._gui_choice.mode == "agent"
        self._guest.aio.use_screen(None if agent else self._host_screen())
        self._phase("gui", t, self._gui_choice.describe())

    async def _choose_gui(self) -> GuiChoice:
        """The GUI mode: as asked, or for ``auto`` the agent's when the image has a desktop
        and the agent can take a screenshot (its display works), else QEMU's."""
        if self.options.gui != "auto":
            return GuiChoice(self.options.gui, f"gui={self.options.gui!r} was asked for")
        if not self.manifest.desktop:
            return GuiChoice("host", "auto: the image has no desktop; QEMU's screendump and input")
        assert self._guest is not None
        try:
            result = await self._guest.aio.call("screenshot", timeout=GUI_PROBE_TIMEOUT)
            tool_result("screenshot", result)
        except (ToolError, VMTimeout) as error:
            text = error.message if isinstance(error, ToolError) else str(error)
            why = text.splitlines()[0] if text else type(error).__name__
            return GuiChoice("host", f"auto: the agent cannot take a screenshot: {why}")
        return GuiChoice("agent", "auto: the image has a desktop and the agent's screenshot works")

    async def _await_listening(self, timeout: float) -> bool:
        """Wait until the agent's serial health report says it listens (a slow guest takes
        seconds to start Python); False when it never said so within ``timeout``."""
        if self.transport == "serial" or not self.layout.serial_device:
            return False
        deadline = time.monotonic() + timeout
        path = self.machine.agent_serial_path
        # Short pings first: a ping sent before the agent opened its serial device is
        # lost, and waiting out a long timeout then delays the connect by seconds.
        ping_timeout = LISTEN_PING_FIRST_TIMEOUT
        while time.monotonic() < deadline:
            self.machine.check_alive()
            with contextlib.suppress(AdareError, OSError):
                if (await SerialAgentClient.ping_path(path, timeout=ping_timeout)).get("listening"):
                    return True
            ping_timeout = min(ping_timeout * 1.5, LISTEN_PING_MAX_TIMEOUT)
            await asyncio.sleep(0.2)
        return False

    @property
    def ready_command(self) -> str | None:
        """The user's readiness command: the options', else the manifest's, else None."""
        return self.options.ready_command or self.manifest.ready_command

    async def _await_ready_command(self, guest: Guest, command: str) -> None:
        """Ready means what the user says: run ``command`` until it exits 0 (once a
        second, bounded by ``ready_timeout``); the timeout names the command, its tries
        and its last answer."""
        t = time.monotonic()
        deadline = t + self.options.ready_timeout
        tries = 0
        while True:
            tries += 1
            remaining = deadline - time.monotonic()
            try:
                result = await guest.aio.shell(
                    command, timeout=max(1.0, min(remaining, READY_TRY_TIMEOUT))
                )
            except (ToolError, VMTimeout) as error:
                last = str(error).splitlines()[0][:200] if str(error) else type(error).__name__
            else:
                if result.returncode == 0:
                    self._phase("settle", t, f"ready command exited 0 (try {tries})")
                    return
                output = (result.stdout + result.stderr).strip()
                last = f"exit {result.returncode}" + (f": {output[-200:]}" if output else "")
            if time.monotonic() + READY_RETRY_PAUSE >= deadline:
                raise VMTimeout(
                    f"the ready command {command!r} to exit 0 ({tries} tries; last: {last})",
                    self.options.ready_timeout,
                    self.machine.console_tail(),
                )
            await asyncio.sleep(READY_RETRY_PAUSE)

    async def _await_system_running(self, guest: Guest) -> None:
        """Ready means ready: on a systemd guest wait (bounded) until ``systemctl
        is-system-running --wait`` is done starting; ``degraded`` is ready with a warning
        naming the failed units. Guests without systemd are ready at once."""
        t = time.monotonic()
        script = (
            "command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ] || exit 3; "
            f"timeout {SETTLE_TIMEOUT:.0f} systemctl is-system-running --wait; "
            "systemctl list-units --state=failed --no-legend --plain | cut -d' ' -f1 | head -5"
        )
        result = await guest.aio.shell(script, timeout=SETTLE_TIMEOUT + 15)
        if result.returncode == 3 and not result.stdout.strip():
            return
        state, *failed = result.stdout.split() or ["unknown"]
        if state == "running":
            self._phase("settle", t, "systemd: running")
        elif state == "degraded":
            self._phase("settle", t, f"systemd: degraded, ready anyway (failed: "
                        f"{', '.join(failed) or '?'})")  # fmt: skip
        else:
            self._phase("settle", t, f"systemd still {state!r} after {SETTLE_TIMEOUT:.0f} s; "
                        "ready anyway")  # fmt: skip

    def _cloud_init_seed(self) -> Path | None:
        """The NoCloud seed for an image whose agent is not handed over at boot (Linux,
        ``install="auto"``): cloud-init images take the agent from it, others ignore it."""
        if self.handoff or self.options.install != "auto" or self.layout.os != "linux":
            return None
        assert self._bundle is not None
        return write_seed(
            self.workdir / "cidata.iso", self.layout, self._bundle, self.agent_config,
            instance_id=f"adare-{self.token[:16]}",
        )  # fmt: skip

    async def _await_delivery(self) -> Channel:
        """QGA answering, or (with a seed) the agent cloud-init started listening."""
        serial = self.machine.agent_serial_path if self.layout.serial_device else None
        try:
            return await self._bounded_delivery(serial)
        except AgentUnreachable as failure:
            raise AgentUnreachable(
                failure.diagnosis, failure.details, self.machine.console_tail()
            ) from None

    async def _bounded_delivery(self, serial: Path | None) -> Channel:
        return await self.machine.bounded(
            await_delivery(
                lambda: self.qga.sync(self.options.boot_timeout),
                seed=self._seed is not None,
                console_log=self.machine.console_log_path,
                serial_path=serial,
                ping=SerialAgentClient.ping_path,
            ),
            self.options.boot_timeout + 5,
            "qemu-ga to answer guest-sync"
            + (" or cloud-init to start the agent" if self._seed else ""),
        )

    async def _await_qga(self, timeout: float) -> None:
        async def sync() -> None:
            await self.qga.sync(timeout)

        await self.machine.bounded(sync(), timeout + 5, "qemu-ga to answer guest-sync")

    async def open_transport(self, token: str) -> AgentConnection:
        """Connect to the agent over ``transport`` with ``token`` (the default connector;
        the serial link needs no token: only this host holds its socket).

        :raise AgentUnreachable: the agent did not answer (not yet diagnosed).
        """
        if self.transport == "serial":
            path = self.machine.agent_serial_path
            try:
                return await SerialAgentClient.connect(path, timeout=30.0)
            except AgentDisconnected as exc:
                raise AgentUnreachable(
                    f"the agent does not answer on its serial link {path}",
                    {"attempts": [str(exc)]},
                ) from exc
        port = self.machine.agent_port
        assert port is not None, "websocket transport without a forwarded port"
        return await AgentClient.connect("127.0.0.1", port, token, backoff=0.5)

    async def _aconnect(self, token: str | None = None) -> AgentConnection:
        """Connect with ``token`` (default: this VM's own); a failure is diagnosed."""
        try:
            return await self._connector(self, token or self.token)
        except AgentUnreachable as failure:
            self.machine.check_alive()
            raise await self._adiagnose(failure) from failure

    async def _adiagnose(self, failure: AgentUnreachable) -> AgentUnreachable:
        """Ask the serial link and QGA what is wrong; the decided cause as the error."""
        facts = AgentFacts(
            port=int(self.agent_config.get("port", DEFAULT_PORT)),
            connect_errors=list(failure.details.get("attempts", [str(failure)])),
            log_path=self.layout.log_path,
        )
        if self.transport != "serial":
            await serial_health(self._serial_ping, facts)
        try:
            await self._await_qga(20.0)
        except (QGAError, AdareError) as exc:
            facts.qga_error = str(exc).splitlines()[0]
        else:
            logs = [self.layout.log_path, self.layout.output_path]
            await guest_facts(self._qga_run, facts, logs, self.layout.python)
        diagnosed = unreachable(facts)
        diagnosed.console_tail = self.machine.console_tail(20)
        return diagnosed

    async def _serial_ping(self) -> dict[str, Any]:
        return await SerialAgentClient.ping_path(self.machine.agent_serial_path, timeout=5.0)

    async def _qga_run(self, argv: Sequence[str], timeout: float) -> tuple[int, str, str]:
        return await qga_run(self.qga, argv, timeout)

    # -- snapshots and reboot ----------------------------------------------------------
    #
    # Every snapshot step closes the agent connection first and connects again after:
    # the guest's TCP state is saved and restored with its RAM, so a WebSocket kept
    # open across loadvm would point at a connection the restored guest never had
    # (the host's side hangs), and one kept across savevm would be restored later
    # with a stale sequence number. A fresh connection costs ~0.1 s; a hang costs
    # the whole call timeout.

    async def _adisconnect(self) -> None:
        if self._guest is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._guest.aio.connection.close(), 10)

    async def _areconnect(self) -> None:
        assert self._guest is not None
        self._guest.aio.attach(await self._aconnect())

    def reconnect(self) -> None:
        """Close the agent connection and connect again (diagnosed when that fails).

        :raise VMDied: the machine is not running (with the reason and the console tail).
        """

        async def reconnect() -> None:
            self.machine.check_alive()
            await self._adisconnect()
            await self._areconnect()

        self._run(reconnect())

    def save_ready(self, tag: str = READY_TAG) -> None:
        """Save the VM (RAM, devices, disk) as its ready state; the agent reconnects after.

        :raise VMDied: the machine is not running, or died meanwhile.
        """

        async def save() -> None:
            self.machine.check_alive()
            await self._adisconnect()
            await self.machine.asavevm(tag)
            await self._areconnect()

        self._run(save())

    def restore_ready(self, tag: str = READY_TAG) -> None:
        """Return to the saved ready state (disconnect, ``loadvm``, reconnect).

        :raise VMDied: the machine is not running, or died meanwhile.
        """

        steps: dict[str, float] = {}

        async def restore() -> None:
            self.machine.check_alive()
            t = time.monotonic()
            await self._adisconnect()
            steps["disconnect"], t = time.monotonic() - t, time.monotonic()
            await self.machine.aloadvm(tag)
            steps["loadvm"], t = time.monotonic() - t, time.monotonic()
            await self._areconnect()
            steps["reconnect"] = time.monotonic() - t

        self._run(restore())
        self.last_restore = steps

    def reboot(self, progress: Progress | None = None) -> None:
        """Boot the guest again from a fresh overlay (a clean disk) and reconnect.

        QEMU runs with ``-no-reboot`` (a guest crash must end it), so a reset would stop
        it: the VM restarts QEMU instead, with the same token and options. Saved
        snapshots live in the overlay and are gone afterwards.
        """
        with contextlib.suppress(Exception):
            self._run(self._aclose(), timeout=30)
        self._qga = None
        if self._machine is not None:
            self._machine.shutdown()
        self._machine = None
        self.start(progress if progress is not None else self._progress)

    # -- evidence ---------------------------------------------------------------------------

    def screendump(self) -> Image.Image:
        """The guest display as the hypervisor sees it (no agent needed)."""
        return self._run(self.machine.ascreendump())

    def wait_for_console(self, pattern: str | re.Pattern[str], timeout: float = 60.0) -> str:
        """Wait until a line of the guest's console (the serial console the kernel and
        init write to) matches ``pattern`` (a regex, ``search`` semantics); returns that
        line. Lines still in the console ring count, so output from before the call
        matches too.

        :raise VMTimeout: nothing matched within ``timeout`` s (with the console's last lines).
        :raise VMDied: QEMU exited or the guest panicked first.
        """
        return self.machine.wait_for_console(pattern, timeout).string

    def console_tail(self, n: int = 40) -> list[str]:
        """The last ``n`` console lines."""
        return self.machine.console_tail(n)

    def agent_log_tail(self, n: int = 40) -> list[str]:
        """The last ``n`` lines of the agent's log: via the agent, else via QGA."""
        log = self.layout.log_path
        if self._guest is not None and self.layout.os != "windows":
            with contextlib.suppress(AdareError):
                return self._guest.shell(
                    f"tail -n {int(n)} '{log}'", timeout=10
                ).stdout.splitlines()

        async def read() -> bytes:
            await self._await_qga(20.0)
            return await self.qga.file_read(log, timeout=20.0)

        try:
            data = self._run(read())
        except AdareError as exc:
            return [f"(agent log unavailable: {str(exc).splitlines()[0]})"]
        return data.decode("utf-8", "replace").splitlines()[-n:]

    # -- evidence from the hypervisor (mechanics in qemu/, the manifest in forensics/) ------

    def network_capture(
        self, path: str | Path, *, snaplen: int = CAPTURE_SNAPLEN,
        max_bytes: int = CAPTURE_MAX_BYTES,
    ) -> contextlib.AbstractContextManager[NetworkCapture]:  # fmt: skip
        """``with vm.network_capture("net.pcap") as cap:`` the guest's traffic as pcap."""
        require(self.machine, Capability.NETWORK_CAPTURE)
        return self._sync_context(
            self.machine.network_capture(path, snaplen=snaplen, max_bytes=max_bytes)
        )

    @contextlib.contextmanager
    def _sync_context(self, manager: contextlib.AbstractAsyncContextManager[T]) -> Iterator[T]:
        value = self._run(manager.__aenter__())
        try:
            yield value
        finally:
            self._run(manager.__aexit__(None, None, None))

    def dump_memory(
        self, path: str | Path, format: DumpFormat = "elf", *, resume: bool = True,
        timeout: float = DUMP_TIMEOUT,
    ) -> Path:  # fmt: skip
        """The guest's RAM to ``path`` (paused; resumed after unless ``resume=False``)."""
        require(self.machine, Capability.MEMORY_DUMP)
        dump = self.machine.adump_memory(path, format, resume=resume, timeout=timeout)
        return self._run(dump).path

    def export_disk(self, path: str | Path, format: DiskFormat = "raw") -> Path:
        """The guest's disk now (file systems frozen by qemu-ga, else synced) to ``path``."""
        require(self.machine, Capability.DISK_EXPORT)
        exported = self.machine.aexport_disk(path, format, qga=self._freezer(),
                                             flush=self._agent_sync)  # fmt: skip
        return self._run(exported).path

    def resume(self) -> None:
        """Let a guest paused by ``dump_memory(..., resume=False)`` run again."""
        self._run(self.machine.aresume())

    def collect_evidence(
        self, dest: str | Path, memory: bool = True, disk: bool = True, pcap: bool = True,
        fs_diff: FsDiff | None = None, *, test_id: str | None = None,
    ) -> dict[str, Any]:  # fmt: skip
        """Pause once, take RAM (ELF), disk (raw) and the running captures' pcap into
        ``dest``, resume; writes ``dest/manifest.json`` (+ CASE ``manifest.jsonld``).
        Returns the manifest; see :mod:`pytest_adare.forensics.evidence_bundle`."""
        target = Path(dest)
        captured = self._run(capture_evidence(
            self.machine, target, memory=memory, disk=disk, pcap=pcap,
            qga=self._freezer(), flush=self._agent_sync,
        ))  # fmt: skip
        facts = BundleFacts(
            image_name=self.manifest.name, image_disk_sha256=self.manifest.disk_sha256,
            qemu_version=captured.qemu_version, qemu_argv=self.machine.argv,
            host_at_pause=captured.host_time, guest_time=captured.guest_time,
            host_at_guest_read=captured.host_time_at_guest_read, quiesced=captured.quiesced,
            test_id=test_id, vm=dataclasses.asdict(self.options), notes=captured.notes,
        )  # fmt: skip
        return write_bundle(target, captured.files, facts, fs_diff)

    def _freezer(self) -> AsyncQGAClient | None:
        return self.qga if self.layout.os != "windows" else None

    async def _agent_sync(self) -> None:
        if self._guest is not None and self.layout.os != "windows":
            await self._guest.aio.shell("sync", timeout=60)

    # -- shutdown -----------------------------------------------------------------------------

    def close(self) -> None:
        """Disconnect and stop QEMU; safe to call more than once."""
        with contextlib.suppress(Exception):
            self._run(self._aclose(), timeout=30)
        if self._machine is not None:
            self._machine.shutdown()

    async def _aclose(self) -> None:
        await self._adisconnect()
        if self._qga is not None:
            await self._qga.close()

    def __enter__(self) -> VM:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()
