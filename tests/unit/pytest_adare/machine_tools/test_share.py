"""A shared folder's disk (issue 39 item 2): the folder's files and modes, every owner the
guest user's (uid and gid 1000) so the desktop user reads what the host's owner could, a
symlink kept as a link (never followed on the host), read back with e2fsprogs' own
debugfs from the disk that was made."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from pytest_adare.host_access import ShareSpec
from pytest_adare.machine_tools.share import GUEST_OWNER, build_share_disk, owner_commands


def inode(disk: Path, path: str) -> dict[str, str]:
    stat = subprocess.run(
        ["debugfs", "-R", f'stat "{path}"', str(disk)],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    user = re.search(r"User:\s+(\d+)\s+Group:\s+(\d+)", stat)
    mode = re.search(r"Mode:\s+(\d+)", stat)
    kind = re.search(r"Type: (\w+)", stat)
    assert user and mode and kind, stat
    return {"owner": f"{user[1]}:{user[2]}", "mode": mode[1], "type": kind[1]}


def test_every_file_is_the_guest_users_with_the_hosts_mode(tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / "deep" / "er").mkdir(parents=True)
    (project / "secret.key").write_text("only the owner reads me\n")
    (project / "secret.key").chmod(0o600)
    (project / "deep" / "er" / "run me.sh").write_text("#!/bin/sh\n")
    (project / "deep" / "er" / "run me.sh").chmod(0o750)
    (project / "passwd").symlink_to("/etc/passwd")
    disk = build_share_disk(ShareSpec(str(project), "/src"), tmp_path / "share0.raw")
    owner = "{}:{}".format(*GUEST_OWNER)
    assert inode(disk, "/") == {"owner": owner, "mode": "0755", "type": "directory"}
    assert inode(disk, "/secret.key") == {"owner": owner, "mode": "0600", "type": "regular"}
    assert inode(disk, "/deep/er/run me.sh") == {"owner": owner, "mode": "0750", "type": "regular"}
    assert inode(disk, "/passwd")["type"] == "symlink"
    assert inode(disk, "/passwd")["owner"] == owner
    dumped = subprocess.run(
        ["debugfs", "-R", "cat /secret.key", str(disk)], capture_output=True, check=True
    ).stdout
    assert dumped == b"only the owner reads me\n"
    assert os.stat("/etc/passwd").st_uid == 0  # the host's file was never touched
    assert not list(tmp_path.glob("*.owners"))  # the command file is gone


def test_a_name_debugfs_cannot_quote_keeps_the_hosts_owner_and_the_rest_are_mapped() -> None:
    commands, skipped = owner_commands(["/", '/say "hi"', "/two\nlines", "/plain"])
    assert skipped == 2
    assert commands.splitlines() == [
        'sif "/" uid 1000', 'sif "/" gid 1000', 'sif "/plain" uid 1000', 'sif "/plain" gid 1000'
    ]  # fmt: skip
