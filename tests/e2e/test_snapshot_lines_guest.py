"""In the built-in guest (one VM): the record-format snapshot the facade takes equals
the JSON format's on ``/usr``, and comes from ``find``."""

from __future__ import annotations

from pytest_adare.forensics.snapshot import FsSnapshot
from pytest_adare.vm import VM


def test_lines_equal_the_json_format_on_usr(console_vm: VM) -> None:
    guest = console_vm.guest
    guest.call("get_filesystem_snapshot", root_path="/usr")  # sets dir atimes once (relatime)
    lines = guest.fs_snapshot("/usr")
    old = FsSnapshot.from_result(
        guest.call("get_filesystem_snapshot", root_path="/usr"), root="/usr"
    )
    assert len(old) > 1000
    assert lines.entries == old.entries
    first = guest.call("get_filesystem_snapshot", root_path="/usr", format="lines", page_bytes=4096)
    assert first["lister"] == "find" and first["cursor"] is not None


def test_hashed_lines_equal_the_json_format(console_vm: VM) -> None:
    guest = console_vm.guest
    root = "/usr/lib/python3.11/json"
    guest.call("get_filesystem_snapshot", root_path=root, hash=True)  # atimes set once
    old = FsSnapshot.from_result(
        guest.call("get_filesystem_snapshot", root_path=root, hash=True), root=root
    )
    lines = guest.fs_snapshot(root, hash=True)
    assert lines.entries == old.entries
    assert all(e.sha256 for e in lines.values() if e.kind == "file")
