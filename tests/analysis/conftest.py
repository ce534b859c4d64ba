"""A real ext4 disk, as an exported guest disk is (the built-in images have no partition
table): a desktop user's home made from real files with ``mke2fs -d``, then a file
unlinked by libext2fs (``debugfs -w rm``), as the guest's kernel would."""

from __future__ import annotations

import datetime as dt
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

DELETED_AT = dt.datetime(2026, 12, 1, 20, 15, 3, tzinfo=dt.timezone.utc)
OPENED_AT = dt.datetime(2026, 12, 1, 20, 16, 0, 123456, tzinfo=dt.timezone.utc)
HOME = "/home/user"
DISSECT_VERSIONS = tuple((Path(__file__).parent / "dissect-versions.txt").read_text().split())
"""The two dissect.target versions compared (both have the trash and recentlyused plugins;
scripts/test builds their environments in the background)."""

XBEL = """<?xml version="1.0" encoding="UTF-8"?>
<xbel version="1.0"
      xmlns:bookmark="http://www.freedesktop.org/standards/desktop-bookmarks"
      xmlns:mime="http://www.freedesktop.org/standards/shared-mime-info">
  <bookmark href="file:///home/user/Documents/notes.txt" added="{when}" modified="{when}"
            visited="{when}">
    <info><metadata owner="http://freedesktop.org">
      <mime:mime-type type="text/plain"/>
      <bookmark:applications>
        <bookmark:application name="Mousepad" exec="&apos;mousepad %u&apos;"
                              modified="{when}" count="1"/>
      </bookmark:applications>
    </metadata></info>
  </bookmark>
</xbel>
"""


@dataclass(frozen=True)
class Disk:
    path: Path
    deleted_at: dt.datetime
    opened_at: dt.datetime


def _write(root: Path, path: str, text: str) -> None:
    target = root / path.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)


def make_disk(where: Path) -> Disk:
    for tool in ("mke2fs", "debugfs"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is missing: install e2fsprogs (scripts/setup)")
    root = where / "root"
    for directory in ("opt", "var/log", "run", "tmp"):  # what Dissect takes for Linux
        (root / directory).mkdir(parents=True)
    _write(root, "/etc/passwd", "root:x:0:0:root:/root:/bin/bash\n"
           "user:x:1000:1000:user:/home/user:/bin/bash\n")  # fmt: skip
    _write(root, "/etc/hostname", "desktop\n")
    _write(root, "/etc/os-release", 'ID=debian\nNAME="Debian GNU/Linux"\nVERSION_ID="12"\n')
    _write(root, f"{HOME}/Documents/notes.txt", "quarterly figures\n")
    _write(root, f"{HOME}/Documents/draft.txt", "to be deleted\n")
    trash = f"{HOME}/.local/share/Trash"
    _write(root, f"{trash}/files/report.txt", "the report\n")
    _write(root, f"{trash}/info/report.txt.trashinfo", "[Trash Info]\n"
           f"Path={HOME}/Documents/report.txt\nDeletionDate=2026-12-01T20:15:03\n")  # fmt: skip
    when = OPENED_AT.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    _write(root, f"{HOME}/.local/share/recently-used.xbel", XBEL.format(when=when))
    disk = where / "disk.raw"
    subprocess.run(["truncate", "-s", "16M", str(disk)], check=True)
    subprocess.run(["mke2fs", "-q", "-t", "ext4", "-d", str(root), str(disk)], check=True)
    subprocess.run(
        ["debugfs", "-w", "-R", f"rm {HOME}/Documents/draft.txt", str(disk)],
        check=True, capture_output=True,
    )  # fmt: skip
    return Disk(disk, DELETED_AT, OPENED_AT)


@pytest.fixture(scope="session")
def desktop_disk(tmp_path_factory: pytest.TempPathFactory) -> Disk:
    """The disk, read-only: every test reads the same file, none may change it."""
    disk = make_disk(tmp_path_factory.mktemp("ext4"))
    disk.path.chmod(0o444)
    return disk
