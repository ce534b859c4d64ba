"""A /dev/kvm that exists but is not this user's: the reason says, from the device and the
user's groups alone, what to run (join its group; or, for a device only root may open, give
it to group kvm first, as udev does)."""

from __future__ import annotations

import grp
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_adare.machine_tools.kvm_access import UserGroups, access_fix

REPO = Path(__file__).resolve().parents[4]

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None,
    reason="acting as another user needs root and setpriv",
)


def _device(gid: int, mode: int) -> Iterator[Path]:
    """A root-owned file standing for /dev/kvm, in a directory everyone may enter."""
    base = Path(tempfile.mkdtemp(prefix="adare-kvm-"))
    base.chmod(0o755)
    device = base / "kvm"
    device.touch(mode=mode)
    os.chown(device, 0, gid)
    device.chmod(mode)
    yield device
    shutil.rmtree(base)


def _kvm_gid() -> int:
    try:
        return grp.getgrnam("kvm").gr_gid
    except KeyError:
        return 0


@pytest.fixture
def group_only_device() -> Iterator[Path]:
    """A file like Debian's /dev/kvm (rw for root and its group kvm only)."""
    yield from _device(_kvm_gid(), 0o660)


@pytest.fixture
def root_only_device() -> Iterator[Path]:
    """A file like a container's /dev/kvm (crw------- root root): joining its group
    would not help."""
    yield from _device(0, 0o600)


def _reason_as_nobody(device: Path) -> str:
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); "
        "from pytest_adare.machine_tools.accel import kvm_unusable_reason; "
        "print(kvm_unusable_reason(sys.argv[2]))"
    )
    python = shutil.which("python3", path="/usr/bin:/bin") or "python3"
    done = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--",
         python, "-I", "-c", code, str(REPO), str(device)],
        capture_output=True, text=True, timeout=60, check=True, env={"USER": "nobody"},
    )  # fmt: skip
    return done.stdout.strip()


def test_an_inaccessible_kvm_device_says_which_group_to_join(group_only_device: Path) -> None:
    group = grp.getgrgid(group_only_device.stat().st_gid).gr_name
    reason = _reason_as_nobody(group_only_device)
    assert reason.startswith(f"{group_only_device}: Permission denied; ")
    assert f"sudo usermod -aG {group} nobody" in reason
    assert "TCG" in reason


def test_a_missing_device_gives_no_group_advice(tmp_path: Path) -> None:
    from pytest_adare.machine_tools.accel import kvm_unusable_reason

    reason = kvm_unusable_reason(str(tmp_path / "kvm"))
    assert reason is not None and "usermod" not in reason


def test_a_device_only_root_may_open_says_to_give_it_to_kvm_then_join_kvm(
    root_only_device: Path,
) -> None:
    reason = _reason_as_nobody(root_only_device)
    assert reason.startswith(f"{root_only_device}: Permission denied; ")
    assert f"{root_only_device} is root's alone (mode 0600)" in reason
    make = "" if _kvm_gid() else "sudo groupadd --system kvm && "
    assert f"run {make}sudo chgrp kvm {root_only_device} && sudo chmod 0660 {root_only_device}" in (
        reason
    )
    assert "sudo usermod -aG kvm nobody and log in again" in reason
    assert "usermod -aG root" not in reason


def test_a_user_listed_in_the_group_since_the_session_began_is_told_to_log_in_again(
    group_only_device: Path,
) -> None:
    gid = group_only_device.stat().st_gid
    group = grp.getgrgid(gid).gr_name
    groups = UserGroups("alice", process_gids=frozenset({1000}), listed_gids=frozenset({1000, gid}))
    fix = access_fix(str(group_only_device), groups)
    assert fix.startswith(f"alice is in {group_only_device}'s group {group} since this session")
    assert f"newgrp {group}" in fix and "usermod" not in fix


def test_a_process_already_in_the_group_is_not_told_to_join_it(group_only_device: Path) -> None:
    gid = group_only_device.stat().st_gid
    groups = UserGroups("alice", process_gids=frozenset({gid}), listed_gids=frozenset({gid}))
    fix = access_fix(str(group_only_device), groups)
    assert "usermod" not in fix and "an ACL, a security module" in fix
