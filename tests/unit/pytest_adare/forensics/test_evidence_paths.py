"""How untrusted guest paths become host paths under the evidence directory."""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

import pytest

from pytest_adare.forensics.evidence import UnsafeGuestPath, contained_path, relative_evidence_path


@pytest.mark.parametrize(
    ("guest_path", "expected"),
    [
        ("/home/user/report.pdf", "home/user/report.pdf"),
        ("/home/user/../../../../etc/passwd", "etc/passwd"),
        ("../../x", "x"),
        ("/a/./b//c", "a/b/c"),
        ("C:\\Users\\bob\\NTUSER.DAT", "C/Users/bob/NTUSER.DAT"),
        ("C:\\..\\..\\boot.ini", "boot.ini"),
        ("\\\\server\\share\\f", "server/share/f"),
        ("/weird:name", "weird:name"),
    ],
)
def test_guest_paths_are_rebuilt_without_escape_routes(guest_path: str, expected: str) -> None:
    assert relative_evidence_path(guest_path) == PurePosixPath(expected)


@pytest.mark.parametrize("guest_path", ["/tmp/a\0b", "/", "..", "/../..", ""])
def test_paths_naming_no_file_or_holding_nul_are_refused(guest_path: str) -> None:
    with pytest.raises(UnsafeGuestPath):
        relative_evidence_path(guest_path)


def test_overlong_components_are_shortened_with_a_hash() -> None:
    first = relative_evidence_path("/d/" + "é" * 200 + "1")
    second = relative_evidence_path("/d/" + "é" * 200 + "2")
    assert first != second
    assert all(len(os.fsencode(part)) <= 255 for part in first.parts + second.parts)


def test_overlong_paths_go_to_a_flat_hashed_name() -> None:
    deep = relative_evidence_path("/" + "/".join(["d" * 200] * 20))
    assert deep.parts[0] == "_overlong" and len(deep.parts) == 2


def test_contained_path_creates_parents_and_refuses_symlinks(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    dest.mkdir()
    target = contained_path(dest, PurePosixPath("a/b/c.txt"))
    assert target == dest / "a/b/c.txt" and (dest / "a/b").is_dir()
    (dest / "link").symlink_to(tmp_path)
    with pytest.raises(UnsafeGuestPath, match="is a symlink"):
        contained_path(dest, PurePosixPath("link/x"))
    (dest / "file").write_text("x")
    with pytest.raises(UnsafeGuestPath, match="not a directory"):
        contained_path(dest, PurePosixPath("file/x"))
