"""Guest-made text reaches report sections and error messages with its control
characters escaped, and a panic leads the console section (hostile fake VM)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from pytest_adare.errors import AdareError, AgentDisconnected, ToolError, VMDied, format_tail
from pytest_adare.machine.console import ConsoleCapture
from pytest_adare.plugin.reports import _say_what_killed_the_guest, _write_evidence

HOSTILE = "\x1b]0;owned\x07\x1b[2J\x1b]52;c;cm0gLXJmIH4=\x07\x00\x9b"


def _refuse(*_: Any) -> Any:
    raise OSError("no display")


@pytest.mark.asyncio
async def test_console_and_agent_log_sections_escape_controls_and_lead_with_the_panic(
    tmp_path: Path,
) -> None:
    log = tmp_path / "console.log"
    capture = ConsoleCapture(log)
    capture.data_received(f"{HOSTILE}\nKernel panic - not syncing: x\n".encode())
    capture.data_received(b"trace\n" * 300)
    capture.connection_lost(None)
    vm = SimpleNamespace(
        console_tail=capture.tail,
        machine=SimpleNamespace(console_log_path=log),
        agent_log_tail=lambda n: [f"agent said {HOSTILE}", "\ttabbed"],
        gui="qemu",
        screendump=_refuse,
    )
    folder = tmp_path / "evidence"
    folder.mkdir()
    sections, _ = _write_evidence(SimpleNamespace(vm=vm), folder, "", infra=True)  # type: ignore[arg-type]
    text = dict(sections)
    console, agent = text["adare console tail"], text["adare agent log tail"]
    assert console.startswith("== what killed the guest, from console line 2: Kernel panic")
    for shown in (console, agent):
        assert not any(ch in shown for ch in "\x1b\x07\x00\x9b")
    assert "\\x1b]0;owned\\x07" in console
    assert (
        agent
        == "agent said \\x1b]0;owned\\x07\\x1b[2J\\x1b]52;c;cm0gLXJmIH4=\\x07\\x00\\x9b\n\ttabbed"
    )
    assert (folder / "console.log").read_bytes() == log.read_bytes(), "the file keeps every byte"


@pytest.mark.parametrize(
    "error",
    [
        ToolError("execute_shell", f"failed: {HOSTILE}"),
        VMDied(f"guest said {HOSTILE}", [HOSTILE]),
        AdareError(HOSTILE),
    ],
    ids=["ToolError", "VMDied", "AdareError"],
)
def test_error_messages_that_quote_the_guest_are_printable(error: AdareError) -> None:
    assert not any(ch in str(error) for ch in "\x1b\x07\x00\x9b")
    assert "\\x1b]52;c;" in str(error)


def test_format_tail_keeps_tabs_and_escapes_the_rest() -> None:
    assert format_tail(["a\tb", "c\rd\x1b"]) == "last console lines:\n  | a\tb\n  | c\\x0dd\\x1b"


def _vm_with_console(tmp_path: Path, text: bytes) -> SimpleNamespace:
    capture = ConsoleCapture(tmp_path / "console.log")
    capture.data_received(text)
    capture.connection_lost(None)
    return SimpleNamespace(vm=SimpleNamespace(console_tail=capture.tail))


@pytest.mark.asyncio
async def test_an_agent_disconnect_error_says_what_killed_the_guest(tmp_path: Path) -> None:
    pooled = _vm_with_console(tmp_path, b"Kernel panic - not syncing: Fatal\n" + b"t\n" * 99)
    error = AgentDisconnected("'execute_shell' got no answer: the agent closed the connection")
    with pytest.raises(AgentDisconnected) as raised:
        raise error
    longrepr = raised.getrepr()
    report = pytest.TestReport("t", ("t.py", 1, "t"), {}, "failed", longrepr, "call")
    _say_what_killed_the_guest(report, [pooled], str(error))  # type: ignore[list-item]
    shown = str(report.longrepr)
    assert "adare: what killed the guest" in shown
    assert "from console line 1: Kernel panic - not syncing: Fatal" in shown

    setup = pytest.TestReport("t", ("t.py", 1, "t"), {}, "failed", f"adare: {error}", "setup")
    _say_what_killed_the_guest(setup, [pooled], str(error))  # type: ignore[list-item]
    assert str(setup.longrepr).splitlines()[1].startswith("== what killed the guest")


@pytest.mark.asyncio
async def test_a_vm_died_error_is_not_told_twice(tmp_path: Path) -> None:
    pooled = _vm_with_console(tmp_path, b"BUG: soft lockup\n")
    error = VMDied("QEMU exited", pooled.vm.console_tail())
    report = pytest.TestReport("t", ("t.py", 1, "t"), {}, "failed", f"adare: {error}", "setup")
    _say_what_killed_the_guest(report, [pooled], str(error))  # type: ignore[list-item]
    assert report.longrepr == f"adare: {error}"
    assert str(error).count("what killed the guest") == 1


def _raise_hostile(*_: Any) -> Any:
    raise ValueError(f"the agent answered {HOSTILE}")


def test_why_a_log_or_screenshot_is_missing_is_printable_and_several_vms_are_named(
    tmp_path: Path,
) -> None:
    log = tmp_path / "console.log"
    log.write_text("")
    vm = SimpleNamespace(
        name="server",
        console_tail=lambda n: [],
        machine=SimpleNamespace(console_log_path=log),
        agent_log_tail=_raise_hostile,
        gui="qemu",
        screendump=_raise_hostile,
    )
    folder = tmp_path / "evidence"
    folder.mkdir()
    pooled: Any = SimpleNamespace(vm=vm)
    sections, shot = _write_evidence(pooled, folder, "-1", infra=False, label=" (server: debian)")
    assert shot is None
    assert [title for title, _ in sections] == [
        "adare console tail (server: debian)",
        "adare agent log tail (server: debian)",
        "adare screenshot (server: debian)",
    ]
    for _, text in sections:
        assert not any(ch in text for ch in "\x1b\x07\x00\x9b"), text
    shown = dict(sections)["adare screenshot (server: debian)"]
    assert "the agent answered \\x1b]0;owned\\x07" in shown
