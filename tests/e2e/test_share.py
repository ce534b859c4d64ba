"""A shared host folder on the built-in console image: mounted read-only before the test
starts, every file the guest user's (uid 1000), readable by others as on the host, writes
refused, still there after a restore of the ready state, left out of file-system
snapshots; the VM boots cold and says why. A writable share is the folder itself over
virtiofs, the guest's user its owner, the guest's root nobody."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from image_under_test import desktop_image_under_test, image_under_test

from pytest_adare import launch
from pytest_adare.errors import SnapshotError
from pytest_adare.qemu.virtiofs import NOBODY

pytestmark = pytest.mark.e2e


def test_a_shared_folder_is_mounted_read_only_before_the_test(tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / "pkg").mkdir(parents=True)
    (project / "pkg" / "app.py").write_text("print('hello from the host')\n")
    (project / "README").write_text("shared\n")
    (project / "secret.key").write_text("the owner's\n")
    (project / "secret.key").chmod(0o600)  # only its host owner reads it
    manifest = image_under_test()
    lines: list[str] = []
    with launch(
        manifest.path or manifest.disk, workdir=tmp_path / "vm", progress=lines.append,
        share={str(project): "/src"},
    ) as vm:  # fmt: skip
        names = [p.name for p in vm.phases]
        assert "warm" not in names and {"share", "mount"} <= set(names), lines
        assert any("warm: a shared folder" in line for line in lines), lines
        guest = vm.guest
        assert guest.succeed("python3 /src/pkg/app.py") == "hello from the host\n"
        assert guest.succeed("cat /src/README", run_as_user="nobody") == "shared\n"
        # Every file is the guest user's (uid 1000): it reads what the host's owner could.
        guest.succeed("grep -q '^[^:]*:[^:]*:1000:' /etc/passwd || adduser -D -H -u 1000 tester")
        user = guest.succeed("awk -F: '$3 == 1000 { print $1 }' /etc/passwd").strip()
        assert guest.succeed("stat -c '%u:%g %a' /src/secret.key") == "1000:1000 600\n"
        assert guest.succeed("cat /src/secret.key", run_as_user=user) == "the owner's\n"
        assert "Permission denied" in guest.fail("cat /src/secret.key", run_as_user="nobody").stderr
        refused = guest.fail("touch /src/new-file")
        assert "Read-only file system" in refused.stderr
        assert not (project / "new-file").exists()
        assert guest.aio.shared_paths == ("/src",)
        # Host data, not the scenario's: a snapshot leaves the share out unless asked.
        assert "/src/pkg/app.py" not in guest.fs_snapshot("/src").entries
        asked = guest.fs_snapshot("/src", include_shares=True).entries
        assert {"/src/pkg/app.py", "/src/README", "/src/secret.key"} <= set(asked)
        assert asked["/src/secret.key"].uid == 1000
        vm.save_ready()
        guest.succeed("touch /root/dirty")
        vm.restore_ready()
        assert guest.succeed("cat /src/README") == "shared\n"


@pytest.fixture
def owned_project() -> Iterator[Path]:
    """A project folder an ordinary uid (1000) owns, in a directory open to others: what a
    root CI job shares writable (a folder root owns is refused, see tests/unit)."""
    top = Path(tempfile.mkdtemp(prefix="adare-rw-share-", dir="/tmp"))
    try:
        top.chmod(0o755)
        project = top / "project"
        project.mkdir()
        (project / "notes.txt").write_text("from the host\n")
        for path in (project, project / "notes.txt"):
            os.chown(path, OWNER, OWNER)
        yield project
    finally:
        shutil.rmtree(top)


OWNER = 1000


def test_a_writable_share_is_the_folder_itself_with_its_ids_mapped(
    owned_project: Path, tmp_path: Path
) -> None:
    manifest = image_under_test()
    lines: list[str] = []
    with launch(
        manifest.path or manifest.disk, workdir=tmp_path / "vm", progress=lines.append,
        share={str(owned_project): "/src:rw"},
    ) as vm:  # fmt: skip
        assert any("mount: /src (writable)" in line for line in lines), lines
        assert any("warm: a shared folder" in line for line in lines), lines
        guest = vm.guest
        assert "type virtiofs (rw" in guest.succeed("mount | grep ' /src '")
        # The owner's files are the guest user's, and that user's writes the owner's.
        guest.succeed("useradd -M -u 1000 tester; useradd -M -u 1001 other")
        assert guest.succeed("stat -c '%u:%g' /src/notes.txt") == "1000:1000\n"
        guest.succeed(
            "echo edited >> /src/notes.txt; echo new > /src/by-user", run_as_user="tester"
        )
        assert (owned_project / "notes.txt").read_text() == "from the host\nedited\n"
        made = (owned_project / "by-user").stat()
        assert (made.st_uid, made.st_gid, made.st_size) == (OWNER, OWNER, 4)
        # The guest's root is nobody on the host: no root file, no device node.
        guest.succeed("echo root > /src/by-root && chmod 4755 /src/by-root")
        assert (owned_project / "by-root").stat().st_uid == NOBODY
        refused = guest.fail("mknod /src/disk b 8 0")
        assert "Operation not permitted" in refused.stderr
        assert not (owned_project / "disk").exists()
        # An unmapped guest user writes nothing.
        guest.fail("cp /etc/hostname /src/by-other", run_as_user="other")
        assert not (owned_project / "by-other").exists()
        # The host's edits are seen at once.
        (owned_project / "later.txt").write_text("written on the host meanwhile\n")
        assert guest.succeed("cat /src/later.txt") == "written on the host meanwhile\n"
        assert guest.aio.shared_paths == ("/src",)
        assert "/src/by-user" not in guest.fs_snapshot("/src").entries
        # QEMU cannot save a VM with a virtiofs device: said, not hung.
        with pytest.raises(SnapshotError, match=r"non-migratable device .*vhost-user-fs"):
            vm.save_ready()
        daemons = _virtiofsd_pids()
        assert daemons, "virtiofsd serves the share while the VM runs"
    assert not set(daemons) & set(_virtiofsd_pids()), "virtiofsd ended with the VM"


def _virtiofsd_pids() -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                command = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if b"virtiofsd" in command.split(b"\0", 1)[0]:
                found.append(int(entry.name))
    return found


def test_the_desktop_user_writes_into_a_writable_share(owned_project: Path, tmp_path: Path) -> None:
    # The desktop image's kernel is Debian's generic one: its virtiofs module is loaded
    # from the image's root file system when the share is mounted.
    manifest = desktop_image_under_test()
    with launch(
        manifest.path or manifest.disk, workdir=tmp_path / "vm",
        share={str(owned_project): "/home/shared:rw"},
    ) as vm:  # fmt: skip
        user = vm.guest.user
        assert user.uid == 1000
        assert user.run("cat /home/shared/notes.txt").check().stdout == "from the host\n"
        user.run("echo from the desktop user > /home/shared/report.txt").check()
        report = owned_project / "report.txt"
        assert report.read_text() == "from the desktop user\n"
        assert (report.stat().st_uid, report.stat().st_gid) == (OWNER, OWNER)
