"""A /dev/kvm that exists but is not this user's: the reason names the group to join."""

from __future__ import annotations

import grp
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None,
    reason="acting as another user needs root and setpriv",
)


@pytest.fixture
def group_only_device() -> Iterator[Path]:
    """A file like this host's /dev/kvm (rw for root and its group only), in a directory
    everyone may enter."""
    base = Path(tempfile.mkdtemp(prefix="adare-kvm-"))
    base.chmod(0o755)
    device = base / "kvm"
    device.touch(mode=0o660)
    try:
        gid = grp.getgrnam("kvm").gr_gid
    except KeyError:
        gid = 0
    os.chown(device, 0, gid)
    device.chmod(0o660)
    yield device
    shutil.rmtree(base)


def _reason_as_nobody(device: Path) -> str:
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); "
        "from pytest_adare.qemu.accel import kvm_unusable_reason; "
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
    from pytest_adare.qemu.accel import kvm_unusable_reason

    reason = kvm_unusable_reason(str(tmp_path / "kvm"))
    assert reason is not None and "usermod" not in reason
