"""Guest-made text reaches report sections and error messages with its control
characters escaped, and a panic leads the console section (hostile fake VM)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from pytest_adare.errors import AdareError, ToolError, VMDied, format_tail
from pytest_adare.plugin.reports import _write_evidence
from pytest_adare.qemu.console import ConsoleCapture

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
