"""An ordinary user (not root, not in the kvm group) from a fresh cache: builds the console
image without root, runs a newcomer's test file against it (one pass, one failure on
purpose) under TCG with the header saying why, the same on its own libvirt session
daemon (``qemu:///session``), builds a recipe on it, and uses a shared image cache it
may only read (issue 29), and has a VM write into the user's own folder through a
writable share (issue 39).

CI runs as root, so the module makes that user (``useradd`` with subordinate ids) and
acts as it with ``setpriv``; the console image is built once, here, by that user.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from image_files import debugfs_cat, debugfs_exists, debugfs_stat, initramfs_stand_in_left
from unprivileged import OrdinaryUser, ordinary_user

from pytest_adare.image.build_claim import WORK_PREFIX
from pytest_adare.image.userns import subordinate_range

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        os.geteuid() != 0 or shutil.which("useradd") is None or shutil.which("setpriv") is None,
        reason="making an ordinary user for the test needs root, useradd and setpriv",
    ),
    pytest.mark.skipif(shutil.which("newuidmap") is None, reason="needs uidmap (scripts/setup)"),
]
USER = "adare-rootless"
BUILD_TIMEOUT = 1800.0

NEWCOMER_TESTS = """
def test_the_guest_runs_linux(guest):
    assert guest.shell("uname -s").check().stdout.strip() == "Linux"


def test_a_file_nobody_wrote_is_missing(guest):
    assert guest.shell("cat /tmp/never-written").returncode == 0
"""

# The guest writes into the user's own folder through a writable share: its user (uid
# 1000) as that user, its root as the user's first subordinate uid.
RW_SHARE_TESTS = """
from pathlib import Path

import pytest


@pytest.mark.adare_vm(share={"./out": "/out:rw"}, isolation="none")
def test_the_guest_writes_into_my_folder(guest):
    guest.succeed("useradd -M -u 1000 tester")
    guest.succeed("echo mine > /out/by-user", run_as_user="tester")
    guest.succeed("echo root > /out/by-root")
    assert Path("out/by-user").read_text() == "mine\\n"
    Path("out/from-host").write_text("host\\n")
    assert guest.succeed("stat -c %u:%g /out/from-host") == "1000:1000\\n"
    assert guest.succeed("cat /out/from-host", run_as_user="tester") == "host\\n"
"""

RECIPE = """\
base = "debian"
install = ["jq", "initramfs-tools"]
provision = ["echo made-by-provision > /etc/adare-rootless"]

[[files]]
source = "motd.txt"
dest = "/etc/motd"
mode = "0640"
"""


@dataclass(frozen=True)
class RootlessBuild:
    user: OrdinaryUser
    base: Path
    cache: Path
    manifest: Path
    seconds: float


@pytest.fixture(scope="module")
def rootless_build() -> Iterator[RootlessBuild]:
    """The console image, built by the ordinary user into a fresh cache of its own."""
    base = Path(tempfile.mkdtemp(prefix="adare-rootless-"))
    user = ordinary_user(USER, base)
    cache = base / "cache"
    cache.mkdir(mode=0o700)
    os.chown(cache, user.uid, user.gid)
    started = time.monotonic()
    done = user.run(
        ["python", "-m", "pytest_adare.image_cli", "build", "debian"],
        cache=cache, cwd=base, timeout=BUILD_TIMEOUT,
    )  # fmt: skip
    seconds = time.monotonic() - started
    assert done.returncode == 0, done.stdout + done.stderr
    manifest = Path(done.stdout.strip().splitlines()[-1])
    try:
        yield RootlessBuild(user, base, cache, manifest, seconds)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_an_ordinary_user_builds_the_console_image_with_roots_files(
    rootless_build: RootlessBuild, tmp_path: Path
) -> None:
    manifest = rootless_build.manifest
    assert manifest.is_relative_to(rootless_build.cache / "pytest-adare/images")
    disk = manifest.parent / "disk.qcow2"
    assert disk.stat().st_uid == rootless_build.user.uid  # the user's cache, the user's files
    assert debugfs_stat(disk, "/etc/shadow", tmp_path) == {"uid": 0, "gid": 42, "mode": 0o640}
    assert debugfs_stat(disk, "/usr/bin/su", tmp_path) == {"uid": 0, "gid": 0, "mode": 0o4755}
    layout = debugfs_stat(disk, "/adare/init/sysinit.sh", tmp_path)
    assert layout == {"uid": 0, "gid": 0, "mode": 0o755}
    # No initramfs packed in the user namespace either, and the stand-in is gone.
    assert initramfs_stand_in_left(disk, tmp_path) == []
    assert not debugfs_exists(disk, "/usr/sbin/update-initramfs", tmp_path)
    # Nothing of the build is left where the user could not delete it.
    leftovers = list(Path(tempfile.gettempdir()).glob(f"{WORK_PREFIX}*"))
    assert not [p for p in leftovers if p.stat().st_uid == rootless_build.user.uid]


def test_a_newcomers_tests_pass_and_fail_as_that_user_under_tcg(
    rootless_build: RootlessBuild,
) -> None:
    project = rootless_build.base / "project"
    project.mkdir()
    (project / "test_newcomer.py").write_text(NEWCOMER_TESTS)
    os.chown(project, rootless_build.user.uid, rootless_build.user.gid)
    done = rootless_build.user.run(
        ["python", "-m", "pytest", "-p", "no:cacheprovider", "--adare-vm=debian", "-rA"],
        cache=rootless_build.cache, cwd=project, timeout=900,
    )  # fmt: skip
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert "1 failed, 1 passed" in out, out
    assert "test_a_file_nobody_wrote_is_missing" in out and "FAILED" in out
    if Path("/dev/kvm").exists():  # this user is not in its group: the header says so
        assert f"sudo usermod -aG kvm {USER}" in out, out


def test_a_newcomers_writable_share_is_written_as_that_user(
    rootless_build: RootlessBuild,
) -> None:
    user = rootless_build.user
    project = rootless_build.base / "rw-share"
    (project / "out").mkdir(parents=True)
    (project / "test_rw_share.py").write_text(RW_SHARE_TESTS)
    for path in (project, project / "out", project / "test_rw_share.py"):
        os.chown(path, user.uid, user.gid)
    done = user.run(
        ["python", "-m", "pytest", "-p", "no:cacheprovider", "--adare-vm=debian", "-rA"],
        cache=rootless_build.cache, cwd=project, timeout=900,
    )  # fmt: skip
    out = done.stdout + done.stderr
    assert done.returncode == 0 and "1 passed" in out, out
    by_user, by_root = (project / "out" / "by-user").stat(), (project / "out" / "by-root").stat()
    assert (by_user.st_uid, by_user.st_gid) == (user.uid, user.gid)
    assert by_root.st_uid == subordinate_range(Path("/etc/subuid"), USER, user.uid)[0]  # type: ignore[index]
    assert by_root.st_gid == subordinate_range(Path("/etc/subgid"), USER, user.uid)[0]  # type: ignore[index]


def _stop_session_daemon(runtime: Path) -> None:
    """End the libvirt session daemon the user's run started (it would idle for 2 min)."""
    for pid_file in runtime.glob("libvirt/*.pid"):
        with contextlib.suppress(ValueError, OSError):
            os.kill(int(pid_file.read_text().strip()), signal.SIGTERM)


def test_a_newcomers_tests_run_on_that_users_libvirt_session(
    rootless_build: RootlessBuild,
) -> None:
    if shutil.which("libvirtd") is None or shutil.which("virsh") is None:
        pytest.skip("needs libvirtd and virsh (scripts/setup installs them)")
    if not (rootless_build.user.site / "libvirt.py").exists():
        pytest.skip("libvirt-python is not installed (the dev extra)")
    project = rootless_build.base / "session-project"
    runtime = rootless_build.base / "runtime"
    for directory in (project, runtime):
        directory.mkdir(mode=0o700)
        os.chown(directory, rootless_build.user.uid, rootless_build.user.gid)
    (project / "test_newcomer.py").write_text(NEWCOMER_TESTS)
    try:
        done = rootless_build.user.run(
            ["python", "-m", "pytest", "-p", "no:cacheprovider", "--adare-vm=debian",
             "--adare-hypervisor=qemu:///session", "-rA"],
            cache=rootless_build.cache, cwd=project, timeout=900,
            env={"XDG_RUNTIME_DIR": str(runtime)},
        )  # fmt: skip
    finally:
        _stop_session_daemon(runtime)
    out = done.stdout + done.stderr
    assert "hypervisor qemu:///session (libvirt)" in out, out
    assert "1 failed, 1 passed" in out, out
    pool = rootless_build.user.home / ".local/share/libvirt/images/adare"
    assert any(p.name.startswith("adare-disk-") for p in pool.iterdir())  # the user's pool


def test_a_recipe_builds_on_the_built_in_base_as_that_user(
    rootless_build: RootlessBuild, tmp_path: Path
) -> None:
    recipes = rootless_build.base / "recipes"
    recipes.mkdir()
    (recipes / "motd.txt").write_text("built without root\n")
    (recipes / "tools.toml").write_text(RECIPE)
    for path in (recipes, recipes / "motd.txt", recipes / "tools.toml"):
        os.chown(path, rootless_build.user.uid, rootless_build.user.gid)
    (recipes / "motd.txt").chmod(0o600)  # private to the user: the build must still read it
    recipes.chmod(0o700)
    done = rootless_build.user.run(
        ["python", "-m", "pytest_adare.image_cli", "build", str(recipes / "tools.toml")],
        cache=rootless_build.cache, cwd=recipes, timeout=BUILD_TIMEOUT,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    disk = Path(done.stdout.strip().splitlines()[-1]).parent / "disk.qcow2"
    assert debugfs_stat(disk, "/etc/motd", tmp_path) == {"uid": 0, "gid": 0, "mode": 0o640}
    assert debugfs_stat(disk, "/etc/adare-rootless", tmp_path)["uid"] == 0
    assert debugfs_stat(disk, "/usr/bin/jq", tmp_path)["uid"] == 0
    # A recipe's own initramfs-tools keeps its real update-initramfs once the build's
    # stand-in (a diversion to /bin/true while packages go in) is taken away.
    assert initramfs_stand_in_left(disk, tmp_path) == []
    assert debugfs_stat(disk, "/usr/sbin/update-initramfs", tmp_path)["mode"] == 0o755
    assert debugfs_cat(disk, "/usr/sbin/update-initramfs", tmp_path).startswith(b"#!/bin/sh")


def test_a_shared_cache_the_user_may_only_read_is_used_and_never_built_into(
    rootless_build: RootlessBuild,
) -> None:
    shared = rootless_build.base / "shared"
    shared.mkdir(mode=0o755)  # root's: the user may read, not write
    image = rootless_build.manifest.parent
    shutil.copytree(image, shared / image.name)
    resolve = (
        "import sys; from pytest_adare.image.resolve import resolve_image; "
        "print(resolve_image(sys.argv[1]).disk)"
    )
    env = {"ADARE_IMAGE_CACHE": str(shared)}
    found = rootless_build.user.run(
        ["python", "-c", resolve, "debian"],
        cache=rootless_build.cache, cwd=rootless_build.base, timeout=60, env=env,
    )  # fmt: skip
    assert found.returncode == 0, found.stderr
    assert found.stdout.strip() == str(shared / image.name / "disk.qcow2")
    missing = rootless_build.user.run(
        ["python", "-c", resolve, "debian-desktop"],
        cache=rootless_build.cache, cwd=rootless_build.base, timeout=60, env=env,
    )  # fmt: skip
    assert missing.returncode != 0
    assert f"not in the shared image cache {shared}" in missing.stderr, missing.stderr
    assert f"{USER} may only read it" in missing.stderr
    assert sorted(p.name for p in shared.iterdir()) == [image.name]  # no lock, no partial
