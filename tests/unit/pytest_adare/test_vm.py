"""``VM`` start, snapshots, reconnect, reboot and close, with fake parts (no QEMU).

The VM makes its parts through its seams (``machine_factory``, ``qga_factory``,
``connector``); here they are fakes that write every step into one shared log, so
the tests can check what happened and in which order. Everything else is real: the
agent bundle (cached), the hand-off files, ``install_agent``, the diagnosis, the
Guest facade and both screens.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from pytest_adare.agent.diagnosis import FACTS_SCRIPT
from pytest_adare.agent.install import FW_CFG_CONFIG, IDENTITY_SCRIPT, PYTHON_VERSION_SCRIPT
from pytest_adare.agent.screen import AgentScreen
from pytest_adare.errors import AgentUnreachable, QGAError, VMDied
from pytest_adare.image.manifest import AgentSpec, ImageManifest
from pytest_adare.machine.spec import MachineSpec
from pytest_adare.machine_tools.qga import QGAExecResult
from pytest_adare.machine_tools.screen import QemuScreen
from pytest_adare.vm import AGENT_STARTED, VM
from pytest_adare.vm_options import READY_TAG, VMOptions
from pytest_adare.vm_phases.state import VMState
from tests.fakes.machine import CONSOLE, FakeMachine

Log = list[str]


def _png(color: str, size: tuple[int, int] = (8, 6)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, color).save(out, "PNG")
    return out.getvalue()


class FakeConnection:
    """An ``AgentConnection`` that answers a few tools the way the agent does."""

    def __init__(self, log: Log, number: int) -> None:
        self.log = log
        self.id = f"conn{number}"
        self.server_info = {"version": "1.2.3", "bundle_hash": "ours"}
        self.subscribers: list[Callable[[Any], Any]] = []
        self.closed = False

    async def call(
        self, tool: str, params: dict[str, Any] | None = None, timeout: float | None = None
    ) -> dict[str, Any]:
        self.log.append(f"{self.id}.call {tool}")
        if tool == "screenshot":
            data = base64.b64encode(_png("red")).decode()
            return {"status": "success", "image": {"data": data}}
        if tool == "execute_shell":
            return {"status": "success", "returncode": 0, "stdout": "focused xterm XTerm\n",
                    "stderr": ""}  # fmt: skip
        return {"status": "success"}

    def subscribe(self, callback: Callable[[Any], Any]) -> Callable[[], None]:
        self.subscribers.append(callback)
        return lambda: self.subscribers.remove(callback)

    async def close(self) -> None:
        self.log.append(f"{self.id}.close")
        self.closed = True


class FakeQGA:
    """The QGA client of a guest that has qemu-ga and Python but no agent yet."""

    def __init__(self, path: Path, log: Log, facts: Mapping[str, Any] | None = None) -> None:
        self.path = path
        self.log = log
        self.facts = facts
        self.answers = True

    async def sync(self, timeout: float = 60.0) -> None:
        self.log.append("qga.sync")
        if not self.answers:
            raise QGAError(f"qemu-ga at {self.path} did not answer guest-sync-delimited")

    async def exec(self, argv: Sequence[str], *, timeout: float = 60.0, **kw: Any) -> QGAExecResult:
        if list(argv[1:3]) == ["-c", IDENTITY_SCRIPT]:
            self.log.append("qga.exec identity")
            return QGAExecResult(2, b"", b"python3: can't open file")
        if list(argv[1:3]) == ["-c", PYTHON_VERSION_SCRIPT]:
            self.log.append("qga.exec python version")
            return QGAExecResult(0, b"3.11.2\n", b"")
        if list(argv[1:3]) == ["-c", FACTS_SCRIPT]:
            self.log.append("qga.exec facts")
            return QGAExecResult(0, json.dumps(self.facts).encode(), b"")
        self.log.append(f"qga.exec {argv[0]}")
        return QGAExecResult(0, b"", b"")

    async def spawn(
        self, argv: Sequence[str], env: Sequence[str] = (), timeout: float = 30.0
    ) -> int:
        return 1

    async def file_write(self, guest_path: str, data: bytes, **kw: Any) -> None:
        self.log.append(f"qga.write {guest_path}")

    async def file_read(self, guest_path: str, *, timeout: float = 120.0) -> bytes:
        return b""

    async def close(self) -> None:
        self.log.append("qga.close")


class Parts:
    """The three seams of one VM, sharing one log."""

    def __init__(self) -> None:
        self.log: Log = []
        self.machines: list[FakeMachine] = []
        self.connections: list[FakeConnection] = []
        self.qgas: list[FakeQGA] = []
        self.connect_failure: AgentUnreachable | None = None
        """Raised by every connect when set."""
        self.dies_on_connect: str | None = None
        """The machine dies (this reason) while the connect is tried."""
        self.qga_answers = True
        self.facts: dict[str, Any] | None = None
        """What the guest's facts script prints (the diagnosis)."""

    def machine(self, image: Any, workdir: Path, spec: MachineSpec) -> FakeMachine:
        machine = FakeMachine(image, workdir, self.log, len(self.machines) + 1, spec=spec)
        self.machines.append(machine)
        return machine

    def qga(self, path: Path) -> FakeQGA:
        qga = FakeQGA(path, self.log, self.facts)
        qga.answers = self.qga_answers
        self.qgas.append(qga)
        return qga

    async def connect(self, vm: VMState, token: str) -> FakeConnection:
        self.log.append(f"connect to {vm.machine.id}")  # type: ignore[attr-defined]
        if self.dies_on_connect is not None:
            self.machines[-1].died = self.dies_on_connect
        if self.connect_failure is not None:
            raise self.connect_failure
        connection = FakeConnection(self.log, len(self.connections) + 1)
        self.connections.append(connection)
        return connection

    def vm(self, manifest: ImageManifest, workdir: Path, **options: Any) -> VM:
        options.setdefault("gui", "agent")
        return VM(
            manifest,
            workdir,
            VMOptions(**options),
            name="t",
            machine_factory=self.machine,  # type: ignore[arg-type]
            qga_factory=self.qga,  # type: ignore[arg-type]
            connector=self.connect,  # type: ignore[arg-type]
        )

    def since(self, mark: int) -> Log:
        return self.log[mark:]


def _phases(vm: VM) -> list[str]:
    """The start-up phase names; the screen choice (``gui``) is not this file's subject."""
    return [phase.name for phase in vm.phases if phase.name != "gui"]


def _builtin(tmp_path: Path, **kw: Any) -> ImageManifest:
    """A built-in-style image: the agent is baked in and started by the init (fw_cfg)."""
    agent = AgentSpec(baked=True, fw_cfg=True, bundle_hash="baked", serial_device=None)
    return ImageManifest(name="builtin", disk=tmp_path / "disk.qcow2", agent=agent, **kw)


def _plain(tmp_path: Path) -> ImageManifest:
    """Any image with qemu-ga: the agent is installed over QGA."""
    agent = AgentSpec(serial_device=None)
    return ImageManifest(name="plain", disk=tmp_path / "disk.qcow2", agent=agent)


@pytest.fixture
def parts() -> Parts:
    return Parts()


@pytest.fixture
def started(parts: Parts, tmp_path: Path) -> Iterator[VM]:
    vm = parts.vm(_builtin(tmp_path), tmp_path / "vm")
    vm.start()
    yield vm
    vm.close()


# -- start ---------------------------------------------------------------------------------


def test_a_built_in_image_boots_with_the_hand_off_and_connects(
    parts: Parts, tmp_path: Path
) -> None:
    lines: list[str] = []
    vm = parts.vm(_builtin(tmp_path), tmp_path / "vm")
    vm.start(progress=lines.append)
    assert _phases(vm) == ["bundle", "qemu", "boot", "connect"]
    assert parts.log == [
        "machine1.start", f"machine1.await_for_console {AGENT_STARTED}", "connect to machine1",
    ]  # fmt: skip
    assert parts.qgas == []  # no QGA round trip on this route
    # The per-VM config (with this VM's token) goes to the guest as a fw_cfg file.
    config = json.loads(parts.machines[0].spec.fw_cfg[FW_CFG_CONFIG].read_text())
    assert config["token"] == vm.token
    assert vm.phases[2].detail.startswith("agent started by the guest's init (config")
    assert lines[1] == "t warm: a firmware-booted disk (warm start needs a direct-boot kernel)"
    assert lines[:1] + lines[2:] == [f"t {phase.line()}" for phase in vm.phases]
    assert vm.guest.aio.connection is parts.connections[0]
    vm.close()


def test_any_image_gets_the_agent_over_qga_then_connects(parts: Parts, tmp_path: Path) -> None:
    vm = parts.vm(_plain(tmp_path), tmp_path / "vm")
    vm.start()
    # settle: the guest says when it has finished starting (systemctl is-system-running)
    assert _phases(vm) == ["bundle", "qemu", "qga", "install", "connect", "settle"]
    assert parts.log[:2] == ["machine1.start", "qga.sync"]
    assert parts.log[-2:] == ["connect to machine1", "conn1.call execute_shell"]
    assert "qga.write /adare/agent/bundle.pyz.part" in parts.log  # none was installed
    assert parts.log.index("qga.write /adare/run/config.json") < parts.log.index(
        "connect to machine1"
    )
    assert vm.phases[3].detail.startswith("installed (none found;")
    assert parts.machines[0].spec.fw_cfg == {}
    vm.close()


def test_install_qga_takes_the_qga_route_even_on_a_built_in_image(
    parts: Parts, tmp_path: Path
) -> None:
    vm = parts.vm(_builtin(tmp_path), tmp_path / "vm", install="qga")
    vm.start()
    assert _phases(vm) == ["bundle", "qemu", "qga", "install", "connect", "settle"]
    vm.close()


def test_a_desktop_image_is_ready_once_a_window_has_the_focus(parts: Parts, tmp_path: Path) -> None:
    vm = parts.vm(_builtin(tmp_path, desktop=True), tmp_path / "vm")
    vm.start()
    assert _phases(vm)[-2:] == ["connect", "desktop"]
    desktop = next(phase for phase in vm.phases if phase.name == "desktop")
    assert desktop.detail == "xterm XTerm has the keyboard focus"
    assert parts.log[-1] == "conn1.call execute_shell"
    vm.close()


def test_a_failed_connect_is_diagnosed_with_the_console_tail(parts: Parts, tmp_path: Path) -> None:
    parts.connect_failure = AgentUnreachable(
        "could not connect", {"attempts": ["ConnectionRefusedError: [Errno 111]"]}
    )
    parts.facts = {
        "agent_pids": [], "proc_net_tcp": "", "firewalld_state": None, "firewalld_zone": None,
        "firewalld_ports": None, "nft_ruleset": None, "iptables_rules": None,
        "log_path": "/adare/run/agent.log",
        "log_tail": ["Traceback (most recent call last):", "OSError: [Errno 98] in use"],
    }  # fmt: skip
    # Over the serial transport the diagnosis asks QGA only (no serial ping of its own).
    vm = parts.vm(_builtin(tmp_path), tmp_path / "vm", transport="serial")
    with pytest.raises(AgentUnreachable) as raised:
        vm.start()
    error = raised.value
    assert str(error).startswith(
        "the agent is not running in the guest (it exited); "
        "last log line: OSError: [Errno 98] in use"
    )
    assert error.console_tail == CONSOLE
    assert error.details["connect_errors"] == ["ConnectionRefusedError: [Errno 111]"]
    assert error.__cause__ is parts.connect_failure
    assert "qga.exec facts" in parts.log
    vm.close()


def test_a_failed_connect_to_a_guest_answering_nothing_says_so(
    parts: Parts, tmp_path: Path
) -> None:
    parts.connect_failure = AgentUnreachable("could not connect", {"attempts": ["refused"]})
    parts.qga_answers = False
    vm = parts.vm(_builtin(tmp_path), tmp_path / "vm", transport="serial")
    with pytest.raises(AgentUnreachable, match="answers neither QGA nor the agent's serial"):
        vm.start()
    vm.close()


def test_a_failed_connect_to_a_dead_machine_says_it_died(parts: Parts, tmp_path: Path) -> None:
    parts.connect_failure = AgentUnreachable("could not connect", {"attempts": ["refused"]})
    parts.dies_on_connect = "the guest panicked"
    vm = parts.vm(_builtin(tmp_path), tmp_path / "vm")
    with pytest.raises(VMDied, match="the guest panicked"):
        vm.start()
    assert "qga.sync" not in parts.log  # nothing to diagnose in a dead machine
    vm.close()


# -- snapshots and reconnect ---------------------------------------------------------------


def test_save_ready_disconnects_before_savevm_and_reconnects_after(
    parts: Parts, started: VM
) -> None:
    guest = started.guest
    mark = len(parts.log)
    started.save_ready()
    assert parts.since(mark) == [
        "conn1.close",
        f"machine1.savevm {READY_TAG}",
        "connect to machine1",
    ]
    assert started.guest is guest
    assert guest.aio.connection is parts.connections[1]


def test_the_ready_command_is_the_options_else_the_manifests(parts: Parts, tmp_path: Path) -> None:
    image = replace(_plain(tmp_path), ready_command="systemctl is-active app")
    assert parts.vm(image, tmp_path / "a").ready_command == "systemctl is-active app"
    marked = parts.vm(image, tmp_path / "b", ready_command="test -e /run/ready")
    assert marked.ready_command == "test -e /run/ready"
    assert parts.vm(_plain(tmp_path), tmp_path / "c").ready_command is None


def test_restore_ready_disconnects_before_loadvm_and_reconnects_after(
    parts: Parts, started: VM, monkeypatch: pytest.MonkeyPatch
) -> None:
    loadvm_seconds = 0.05
    plain_loadvm = FakeMachine.aloadvm

    async def slow_loadvm(self: FakeMachine, tag: str, timeout: float = 120.0) -> None:
        await plain_loadvm(self, tag, timeout)
        await asyncio.sleep(loadvm_seconds)

    monkeypatch.setattr(FakeMachine, "aloadvm", slow_loadvm)
    started.save_ready()
    mark = len(parts.log)
    began = time.monotonic()
    started.restore_ready("other-tag")
    wall = time.monotonic() - began
    assert parts.since(mark) == ["conn2.close", "machine1.loadvm other-tag", "connect to machine1"]
    assert started.guest.aio.connection is parts.connections[2]
    # each step's time is kept for the restore breakdown (bench/isolation.py)
    steps = started.last_restore
    assert sorted(steps) == ["disconnect", "loadvm", "reconnect"]
    assert steps["loadvm"] >= loadvm_seconds  # the loadvm's time is counted where it was spent
    assert all(seconds >= 0 for seconds in steps.values())
    assert sum(steps.values()) <= wall


def test_a_snapshot_step_on_a_dead_machine_raises_vm_died_and_touches_nothing(
    parts: Parts, started: VM
) -> None:
    parts.machines[0].died = "QEMU exited with code -9"
    mark = len(parts.log)
    with pytest.raises(VMDied, match="QEMU exited with code -9"):
        started.restore_ready()
    assert parts.since(mark) == []


def test_reconnect_replaces_the_connection_and_keeps_the_subscribers(
    parts: Parts, started: VM
) -> None:
    seen: list[Any] = []
    started.guest.events.subscribe(seen.append)
    mark = len(parts.log)
    started.reconnect()
    assert parts.since(mark) == ["conn1.close", "connect to machine1"]
    assert parts.connections[0].subscribers == []
    assert len(parts.connections[1].subscribers) == 1
    assert started.guest.aio.connection is parts.connections[1]


# -- reboot and close ----------------------------------------------------------------------


def test_reboot_keeps_the_vm_and_guest_shuts_the_old_machine_down_and_attaches_anew(
    parts: Parts, started: VM
) -> None:
    guest = started.guest
    mark = len(parts.log)
    started.reboot()
    assert parts.since(mark) == [
        "conn1.close", "machine1.shutdown", "machine2.start",
        f"machine2.await_for_console {AGENT_STARTED}", "connect to machine2",
    ]  # fmt: skip
    assert started.guest is guest
    assert started.machine is parts.machines[1]
    assert guest.aio.connection is parts.connections[1]
    assert _phases(started) == ["bundle", "qemu", "boot", "connect"]
    # The new machine gets the same token: the guest's config is this VM's.
    config = json.loads(parts.machines[1].spec.fw_cfg[FW_CFG_CONFIG].read_text())
    assert config["token"] == started.token


def test_close_closes_the_connection_before_stopping_qemu_and_can_be_repeated(
    parts: Parts, started: VM
) -> None:
    mark = len(parts.log)
    started.close()
    assert parts.since(mark) == ["conn1.close", "machine1.shutdown"]
    started.close()
    assert not parts.machines[0].alive
    assert parts.connections[0].closed


def test_close_also_closes_the_qga_client(parts: Parts, tmp_path: Path) -> None:
    vm = parts.vm(_plain(tmp_path), tmp_path / "vm")
    vm.start()
    mark = len(parts.log)
    vm.close()
    assert parts.since(mark) == ["conn1.close", "qga.close", "machine1.shutdown"]


def test_close_of_a_vm_that_never_started_does_nothing(parts: Parts, tmp_path: Path) -> None:
    vm = parts.vm(_builtin(tmp_path), tmp_path / "vm")
    vm.close()
    vm.close()
    assert parts.log == []


# -- where screenshots go --------------------------------------------------------------------


def test_gui_host_takes_screenshots_from_qemu(parts: Parts, tmp_path: Path) -> None:
    vm = parts.vm(_builtin(tmp_path), tmp_path / "vm", gui="host")
    vm.start()
    screen = vm.guest.aio.screen
    assert isinstance(screen, QemuScreen) and screen.machine is parts.machines[0]
    mark = len(parts.log)
    assert vm.guest.screenshot().getpixel((0, 0)) == (0, 0, 255)
    assert parts.since(mark) == ["machine1.screendump"]
    vm.close()


def test_gui_host_follows_the_new_machine_after_a_reboot(parts: Parts, tmp_path: Path) -> None:
    vm = parts.vm(_builtin(tmp_path), tmp_path / "vm", gui="host")
    vm.start()
    vm.reboot()
    mark = len(parts.log)
    vm.guest.screenshot()
    assert parts.since(mark) == ["machine2.screendump"]
    vm.close()


def test_gui_agent_takes_screenshots_through_the_agent(parts: Parts, started: VM) -> None:
    assert isinstance(started.guest.aio.screen, AgentScreen)
    mark = len(parts.log)
    assert started.guest.screenshot().getpixel((0, 0)) == (255, 0, 0)
    assert parts.since(mark) == ["conn1.call screenshot"]


# -- gui="auto": which screen, and why -------------------------------------------------------


def test_auto_on_an_image_without_desktop_takes_qemus_screen_without_asking_the_agent(
    parts: Parts, tmp_path: Path
) -> None:
    vm = parts.vm(_builtin(tmp_path), tmp_path / "vm", gui="auto")
    vm.start()
    assert vm.gui == "host" and isinstance(vm.guest.aio.screen, QemuScreen)
    assert vm.gui_choice is not None and "no desktop" in vm.gui_choice.reason
    assert "conn1.call screenshot" not in parts.log
    assert vm.phases[-1].name == "gui" and vm.phases[-1].detail == vm.gui_choice.describe()
    vm.close()


def test_auto_on_a_desktop_takes_the_agents_screen_once_its_screenshot_works(
    parts: Parts, tmp_path: Path
) -> None:
    vm = parts.vm(_builtin(tmp_path, desktop=True), tmp_path / "vm", gui="auto")
    vm.start()
    assert vm.gui == "agent" and isinstance(vm.guest.aio.screen, AgentScreen)
    assert parts.log[-1] == "conn1.call screenshot"  # the probe, after the desktop phase
    vm.close()


def test_auto_on_a_desktop_whose_agent_has_no_display_takes_qemus_and_says_why(
    parts: Parts, tmp_path: Path
) -> None:
    connect = parts.connect

    async def connect_without_display(vm: VMState, token: str) -> FakeConnection:
        connection = await connect(vm, token)
        answer = connection.call

        async def call(
            tool: str, params: dict[str, Any] | None = None, timeout: float | None = None
        ) -> dict[str, Any]:
            if tool == "screenshot":
                return {"status": "error", "message": "no X display: DISPLAY is not set"}
            return await answer(tool, params, timeout)

        connection.call = call  # type: ignore[method-assign]
        return connection

    parts.connect = connect_without_display  # type: ignore[method-assign]
    vm = parts.vm(_builtin(tmp_path, desktop=True), tmp_path / "vm", gui="auto")
    vm.start()
    assert vm.gui == "host" and isinstance(vm.guest.aio.screen, QemuScreen)
    assert vm.gui_choice is not None
    assert vm.gui_choice.reason == (
        "auto: the agent cannot take a screenshot: no X display: DISPLAY is not set"
    )
    vm.close()


def test_the_firmware_reason_says_which_firmware_and_why(parts: Parts, tmp_path: Path) -> None:
    kernel = replace(_plain(tmp_path), kernel=tmp_path / "vmlinuz")
    assert parts.vm(kernel, tmp_path / "k").firmware_reason == "firmware: direct kernel boot"
    uefi = replace(_plain(tmp_path), firmware="uefi", firmware_reason="detected: GPT with an ESP")
    detected = parts.vm(uefi, tmp_path / "d")
    assert detected.firmware_reason == "firmware: uefi (detected: GPT with an ESP)"
    asked = parts.vm(uefi, tmp_path / "a", firmware="bios")
    assert asked.firmware == "bios"
    assert asked.firmware_reason == "firmware: bios (firmware='bios' was asked for)"
    unexplained = parts.vm(replace(uefi, firmware_reason=""), tmp_path / "u")
    assert unexplained.firmware_reason == "firmware: uefi (the default)"


def test_the_vm_shows_what_a_test_calls_and_keeps_its_parts_in_its_state(
    parts: Parts, tmp_path: Path
) -> None:
    vm = parts.vm(_plain(tmp_path), tmp_path / "vm")
    public = {name for name in dir(vm) if not name.startswith("_")}
    assert not public & {"say", "record", "new_machine", "new_qga", "connector", "layout"}
    assert {"guest", "machine", "phases", "options", "name", "state", "aio"} <= public
    assert vm.state is vm.aio.state and vm.state.name == vm.name == "t"
