"""The readiness strategies of ``vm_phases/readiness``: what each waits for, what it says
on the phase line, and how it ends when the guest never gets ready.

The guest is a stand-in whose ``shell`` answers from a script of results (the strategies
read nothing else of it); the machine is the shared :class:`FakeMachine`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_adare.agent.install import GuestLayout
from pytest_adare.errors import VMTimeout
from pytest_adare.guest import ShellResult
from pytest_adare.image.manifest import AgentSpec, ImageManifest
from pytest_adare.vm_options import BOOT_TIMEOUT, VMOptions
from pytest_adare.vm_phases.readiness import (
    Listening,
    Readiness,
    ReadyCommand,
    SystemRunning,
    checks_after_connect,
)
from pytest_adare.vm_phases.readiness import ready_command as ready_command_module
from pytest_adare.vm_phases.readiness.systemd import SETTLE_TIMEOUT, settle_timeout
from pytest_adare.vm_phases.state import VMState
from tests.fakes.machine import CONSOLE, FakeMachine


class ScriptedShell:
    """``guest.aio.shell`` answering each call with the next of ``answers``."""

    def __init__(self, answers: list[ShellResult]) -> None:
        self.answers: Iterator[ShellResult] = iter(answers)
        self.commands: list[str] = []

    async def shell(self, command: str, *, timeout: float | None = None) -> ShellResult:
        self.commands.append(command)
        return next(self.answers)


class Target:
    """A :class:`ReadyTarget` over a scripted shell and a fake machine."""

    def __init__(self, tmp_path: Path, answers: list[ShellResult], **layout: Any) -> None:
        self.shell = ScriptedShell(answers)
        self.machine = FakeMachine(None, tmp_path).start()
        self.guest: Any = type("G", (), {"aio": self.shell})()
        self.transport = "websocket"
        manifest = ImageManifest(name="i", disk=tmp_path / "d", agent=AgentSpec(**layout))
        self.layout = GuestLayout.for_manifest(manifest)


def _result(code: int, out: str = "", err: str = "") -> ShellResult:
    return ShellResult(code, out, err, "cmd")


def _wait(check: Readiness, target: Target) -> str | None:
    return asyncio.run(check.wait(target))  # type: ignore[arg-type]


def test_a_systemd_guest_is_ready_when_running_and_degraded_names_the_failed_units(
    tmp_path: Path,
) -> None:
    running = Target(tmp_path, [_result(0, "running\n")])
    assert _wait(SystemRunning(), running) == "systemd: running"
    assert "is-system-running --wait" in running.shell.commands[0]
    degraded = Target(tmp_path, [_result(1, "degraded\nfoo.service\nbar.mount\n")])
    assert _wait(SystemRunning(), degraded) == (
        "systemd: degraded, ready anyway (failed: foo.service, bar.mount)"
    )


def test_a_guest_without_systemd_is_ready_at_once_and_records_no_phase(tmp_path: Path) -> None:
    assert _wait(SystemRunning(), Target(tmp_path, [_result(3)])) is None


def test_the_ready_command_is_run_until_it_exits_0_and_says_which_try(tmp_path: Path) -> None:
    target = Target(tmp_path, [_result(1, "not yet"), _result(0)])
    assert _wait(ReadyCommand("test -e /run/ok", 30), target) == "ready command exited 0 (try 2)"
    assert target.shell.commands == ["test -e /run/ok"] * 2


def test_a_ready_command_that_never_succeeds_times_out_naming_it_and_its_last_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ready_command_module, "RETRY_PAUSE", 0.05)
    target = Target(tmp_path, [_result(2, "", "no such unit")] * 100)
    with pytest.raises(VMTimeout) as raised:
        _wait(ReadyCommand("systemctl is-active app", 0.2), target)
    message = str(raised.value)
    assert "the ready command 'systemctl is-active app' to exit 0" in message
    assert "last: exit 2: no such unit" in message
    assert raised.value.console_tail == CONSOLE


def test_listening_asks_nothing_without_a_serial_link_or_over_the_serial_transport(
    tmp_path: Path,
) -> None:
    assert _wait(Listening(5), Target(tmp_path, [], serial_device=None)) is None
    serial = Target(tmp_path, [], serial_device="/dev/ttyS1")
    serial.transport = "serial"
    assert _wait(Listening(5), serial) is None


def test_listening_gives_up_after_its_bound_when_the_agent_never_answers(tmp_path: Path) -> None:
    target = Target(tmp_path, [], serial_device="/dev/ttyS1")  # the fake's socket is absent
    assert _wait(Listening(0.3), target) is None


def _state(tmp_path: Path, *, desktop: bool = False, **options: Any) -> VMState:
    manifest = ImageManifest(
        name="i", disk=tmp_path / "d", desktop=desktop, agent=AgentSpec(serial_device=None)
    )
    return VMState(manifest, tmp_path, VMOptions(**options))


def test_the_checks_after_connect_are_the_ready_command_else_systemd_then_the_desktop(
    tmp_path: Path,
) -> None:
    def kinds(vm: VMState) -> list[tuple[str, str]]:
        return [(name, type(check).__name__) for name, check in checks_after_connect(vm)]

    assert kinds(_state(tmp_path)) == [("settle", "SystemRunning")]
    assert kinds(_state(tmp_path, desktop=True, ready_command="true")) == [
        ("settle", "ReadyCommand"), ("desktop", "FocusedDesktop"),
    ]  # fmt: skip


def test_a_raised_boot_timeout_raises_the_settle_bound_the_script_waits(tmp_path: Path) -> None:
    # A cloud-init first boot given --adare-boot-timeout=600 settled after 180 s had run
    # out (its agent starts before cloud-init's last stages): it gets 360 s.
    bound = settle_timeout(600, BOOT_TIMEOUT)
    assert bound == 360 and settle_timeout(BOOT_TIMEOUT, BOOT_TIMEOUT) == SETTLE_TIMEOUT
    starting = Target(tmp_path, [_result(1, "starting\n")])
    said = _wait(SystemRunning(bound), starting)
    assert said == "systemd still 'starting' after 360 s; ready anyway"
    assert "timeout 360 systemctl is-system-running --wait" in starting.shell.commands[0]
