"""What a rootless build needs, and what it says when the host lacks it (issue 29)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from pytest_adare.image.userns import (
    HostRoot,
    NamespaceRoot,
    build_privilege,
    subordinate_range,
    userns_blockers,
)

REPO = Path(__file__).resolve().parents[4]


def test_the_subordinate_range_is_found_by_name_or_uid(tmp_path: Path) -> None:
    subuid = tmp_path / "subuid"
    subuid.write_text("alice:100000:65536\n1002:300000:1000\nbroken line\n")
    assert subordinate_range(subuid, "alice", 1001) == (100000, 65536)
    assert subordinate_range(subuid, "bob", 1002) == (300000, 1000)
    assert subordinate_range(subuid, "carol", 1003) is None
    assert subordinate_range(tmp_path / "missing", "alice", 1001) is None


def test_kernel_settings_that_forbid_user_namespaces_name_their_sysctl(tmp_path: Path) -> None:
    (tmp_path / "kernel").mkdir()
    (tmp_path / "user").mkdir()
    (tmp_path / "kernel/unprivileged_userns_clone").write_text("0\n")
    (tmp_path / "kernel/apparmor_restrict_unprivileged_userns").write_text("1\n")
    (tmp_path / "user/max_user_namespaces").write_text("15000\n")
    found = userns_blockers(tmp_path)
    assert len(found) == 2
    assert "sudo sysctl -w kernel.unprivileged_userns_clone=1" in found[0]
    assert "kernel.apparmor_restrict_unprivileged_userns=0" in found[1]
    (tmp_path / "kernel/unprivileged_userns_clone").write_text("1\n")
    (tmp_path / "kernel/apparmor_restrict_unprivileged_userns").write_text("0\n")
    assert userns_blockers(tmp_path) == []


def test_root_builds_as_the_hosts_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("checks what root gets")
    privilege = build_privilege()
    assert privilege == HostRoot() and privilege.wrap(["true"]) == ["true"]


def test_a_namespace_command_is_wrapped_in_the_entry_script() -> None:
    privilege = NamespaceRoot("0 100000 65536 65536 1000 1", "0 100000 65536 65536 1000 1")
    argv = privilege.wrap(["mkfs.ext4", "-d", "root"])
    assert argv[1:3] == ["-I", str(REPO / "pytest_adare/image/userns_enter.py")]
    assert argv[-3:] == ["mkfs.ext4", "-d", "root"]
    assert privilege.mmdebstrap_mode == "unshare"


def _as_nobody(code: str, path: str) -> subprocess.CompletedProcess[str]:
    python = shutil.which("python3", path="/usr/bin:/bin") or "python3"
    setpriv = shutil.which("setpriv") or "setpriv"
    return subprocess.run(
        [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "--",
         python, "-I", "-c", f"import sys; sys.path.insert(0, {str(REPO)!r}); {code}"],
        capture_output=True, text=True, timeout=60, check=False,
        env={"PATH": path, "USER": "nobody", "HOME": "/nonexistent"},
    )  # fmt: skip


BUILD_AS_NOBODY = "from pytest_adare.image.userns import build_privilege; build_privilege()"


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None, reason="acts as nobody: needs root"
)
def test_a_user_without_subordinate_ids_is_told_how_to_add_them() -> None:
    if shutil.which("newuidmap") is None:
        pytest.skip("needs uidmap installed")
    done = _as_nobody(BUILD_AS_NOBODY, "/usr/bin:/bin:/usr/sbin:/sbin")
    assert done.returncode != 0
    assert "nobody has no subordinate ids in /etc/subuid and /etc/subgid" in done.stderr
    assert "sudo usermod --add-subuids 100000-165535 --add-subgids 100000-165535 nobody" in (
        done.stderr
    )
    assert "sudo adare-image build debian --out DIR" in done.stderr


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None, reason="acts as nobody: needs root"
)
def test_a_host_without_uidmap_is_told_to_install_it(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tmp_path.chmod(0o755)
    bin_dir.chmod(0o755)
    done = _as_nobody(BUILD_AS_NOBODY, str(bin_dir))  # a PATH without newuidmap
    assert done.returncode != 0
    assert "newuidmap and newgidmap not found: run sudo apt-get install uidmap" in done.stderr
