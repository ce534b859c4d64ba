"""run_tool: a command-line tool over the export, its output parsed; each way it can go
wrong is a ToolFailed naming the tool, and nothing is scored as found."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_adare.analysis import EvidenceUnreadable, ToolFailed, parse_fls, run_tool
from tests.analysis.conftest import HOME, Disk

FLS = ["fls", "-r", "-p", "{disk}"]


def test_fls_lists_the_export_with_its_deleted_entry(desktop_disk: Disk) -> None:
    found = run_tool(FLS, evidence=desktop_disk.path, parser=parse_fls, kind="file")
    files = {r["path"]: r for r in found["file"]}
    assert files[f"{HOME}/Documents/notes.txt"]["deleted"] is False
    assert files[f"{HOME}/Documents/draft.txt"]["deleted"] is True
    assert files[f"{HOME}/Documents"]["type"] == "d/d"


def test_a_tool_that_fails_is_named_with_its_exit_status_and_message(tmp_path: Path) -> None:
    junk = tmp_path / "junk.raw"
    junk.write_bytes(b"\x00" * 65536)
    with pytest.raises(ToolFailed, match="fls: exit status 1\nCannot determine file system"):
        run_tool(FLS, evidence=junk, parser=parse_fls, kind="file")


def test_a_tool_past_its_deadline_is_killed(desktop_disk: Disk) -> None:
    with pytest.raises(ToolFailed, match=r"sh: no answer within 0.5 s \(killed\)"):
        run_tool(["sh", "-c", "sleep 60 # {disk}"], evidence=desktop_disk.path,
                 parser=parse_fls, kind="file", timeout=0.5)  # fmt: skip


def test_a_missing_tool_is_named(desktop_disk: Disk) -> None:
    with pytest.raises(ToolFailed, match="no-such-fls: cannot start it: No such file"):
        run_tool(["no-such-fls", "{disk}"], evidence=desktop_disk.path, parser=parse_fls,
                 kind="file")  # fmt: skip


def test_output_its_parser_cannot_read_is_a_failure_naming_the_line(tmp_path: Path) -> None:
    text = tmp_path / "listing.txt"
    text.write_text("+ r/r 12:\tnotes.txt\n")  # fls without -p
    with pytest.raises(ToolFailed, match="cat: its output could not be parsed: fls output line 1"):
        run_tool(["cat", "{disk}"], evidence=text, parser=parse_fls, kind="file")


def test_a_flood_of_output_is_refused(desktop_disk: Disk) -> None:
    with pytest.raises(ToolFailed, match="cat: printed 16777216 bytes, more than the 1000"):
        run_tool(["cat", "{disk}"], evidence=desktop_disk.path, parser=parse_fls, kind="file",
                 max_output=1000)  # fmt: skip


def test_bad_evidence_and_placeholders_are_named(tmp_path: Path, desktop_disk: Disk) -> None:
    with pytest.raises(EvidenceUnreadable, match=r"evidence \{disk\}: no readable file"):
        run_tool(FLS, evidence=tmp_path / "gone.raw", parser=parse_fls, kind="file")
    with pytest.raises(ValueError, match=r"\{memory\} names no evidence \(given: \['disk'\]\)"):
        run_tool(["vol", "{memory}"], evidence=desktop_disk.path, parser=parse_fls, kind="file")
