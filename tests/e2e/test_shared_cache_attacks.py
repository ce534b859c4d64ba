"""A hostile member of a shared image cache, as two ordinary users: the victim builds and
boots from a group cache (``ADARE_IMAGE_CACHE``) that the attacker may write too
(issue 34, items 4 and 5).

CI runs as root, so the module makes both users (``useradd``) and a group they share;
the cache is ``root:<group>`` mode 3775, as a group cache is set up (sticky, so members
cannot rename each other's entries). The attacker plants what the issue's attack run
planted: a ``.lock`` symlink to the victim's key, an entry whose disk is that key, and a
disk changed after the victim first booted it. No VM boots: what is refused is refused
before QEMU would start.
"""

from __future__ import annotations

import grp
import json
import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from unprivileged import OrdinaryUser, ensure_user, ordinary_user

from pytest_adare.cache_dir import exclusive_lock
from pytest_adare.errors import ImageError
from pytest_adare.image.cache import SHARED_LOCK_MODE
from pytest_adare.image.recipe import debian_recipe

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("useradd") is None or shutil.which("setpriv") is None,
    reason="making two ordinary users for the test needs root, useradd and setpriv",
)
VICTIM, ATTACKER, GROUP = "adare-cache-victim", "adare-cache-mallory", "adare-cache"
ENTRY = f"debian-{debian_recipe().recipe_hash()}"
RESOLVE = (
    "import sys; from pytest_adare.image.resolve import resolve_image; "
    "print(resolve_image('debian').disk)"
)
PLANT = """\
import hashlib, json, os, sys
entry, disk = sys.argv[1], sys.argv[2]
os.mkdir(entry, 0o755)
with open(os.path.join(entry, "disk.qcow2"), "wb") as own:
    own.write(b"the attacker's own disk")
with open(os.path.join(entry, "disk.qcow2"), "rb") as own:
    sha = hashlib.sha256(own.read()).hexdigest()
manifest = {"name": "debian", "format": "qcow2", "disk": disk, "disk_sha256": sha,
            "recipe_hash": sys.argv[3]}
with open(os.path.join(entry, "adare-image.json"), "w") as out:
    json.dump(manifest, out)
"""


@dataclass(frozen=True)
class Members:
    victim: OrdinaryUser
    attacker: OrdinaryUser
    base: Path

    def cache_of(self, user: OrdinaryUser) -> Path:
        return self.base / f"{user.name}-cache"

    def run(
        self, user: OrdinaryUser, argv: list[str], shared: Path, **env: str
    ) -> subprocess.CompletedProcess[str]:
        return user.run(
            argv, cache=self.cache_of(user), cwd=self.base, timeout=120,
            env={"ADARE_IMAGE_CACHE": str(shared), **env},
        )  # fmt: skip


def _ensure_group(users: list[str]) -> int:
    try:
        grp.getgrnam(GROUP)
    except KeyError:
        made = subprocess.run(["groupadd", GROUP], capture_output=True, text=True, check=False)
        assert made.returncode in (0, 9), made.stderr  # 9: made meanwhile
    for user in users:
        subprocess.run(["usermod", "-aG", GROUP, user], check=True)
    return grp.getgrnam(GROUP).gr_gid


@pytest.fixture(scope="module")
def members() -> Iterator[Members]:
    base = Path(tempfile.mkdtemp(prefix="adare-cache-attacks-"))
    try:
        victim = ordinary_user(VICTIM, base)
        entry = ensure_user(ATTACKER)
        attacker = OrdinaryUser(
            ATTACKER, entry.pw_uid, entry.pw_gid, Path(entry.pw_dir), victim.site
        )
        _ensure_group([VICTIM, ATTACKER])
        for user in (victim, attacker):
            own = base / f"{user.name}-cache"
            own.mkdir(mode=0o700)
            os.chown(own, user.uid, user.gid)
        yield Members(victim, attacker, base)
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def shared(members: Members, tmp_path: Path) -> Path:
    """A fresh group cache: ``root:adare-cache``, mode 3775."""
    root = members.base / f"shared-{tmp_path.name}"
    root.mkdir()
    os.chown(root, 0, grp.getgrnam(GROUP).gr_gid)
    root.chmod(0o3775)
    return root


@pytest.fixture
def victims_key(members: Members, tmp_path: Path) -> Path:
    """The victim's private key: 0600 in a 0700 directory of theirs."""
    home = members.base / f"victim-home-{tmp_path.name}"
    home.mkdir(mode=0o700)
    key = home / "id_ed25519"
    key.write_bytes(b"-----BEGIN OPENSSH PRIVATE KEY-----\nsecret\n")
    key.chmod(0o600)
    for path in (home, key):
        os.chown(path, members.victim.uid, members.victim.gid)
    return key


def _plant_lock_symlink(members: Members, shared: Path, target: Path) -> None:
    link = ["python", "-c", "import os, sys; os.symlink(sys.argv[1], sys.argv[2])"]
    planted = members.run(members.attacker, [*link, str(target), f"{shared}/{ENTRY}.lock"], shared)
    assert planted.returncode == 0, planted.stderr


def test_a_lock_symlink_another_member_planted_leaves_the_victims_key_as_it_was(
    members: Members, shared: Path, victims_key: Path
) -> None:
    _plant_lock_symlink(members, shared, victims_key)
    build = (
        "from pytest_adare.image.cache import build_lock, image_dir\n"
        "from pytest_adare.image.recipe import debian_recipe\n"
        "with build_lock(image_dir(debian_recipe()), 'building debian', 5):\n"
        "    pass\n"
    )
    built = members.run(members.victim, ["python", "-c", build], shared)
    assert built.returncode != 0
    assert f"{ENTRY}.lock: it is a symbolic link (a lock is never followed)" in built.stderr
    assert stat.S_IMODE(victims_key.stat().st_mode) == 0o600


def test_a_lock_symlink_to_a_root_file_leaves_it_as_it_was_when_root_builds(
    members: Members, shared: Path, tmp_path: Path
) -> None:
    shadow = tmp_path / "shadow"
    shadow.write_bytes(b"root:$y$secret")
    shadow.chmod(0o600)
    _plant_lock_symlink(members, shared, shadow)
    with pytest.raises(ImageError, match="it is a symbolic link"):
        with exclusive_lock(shared / f"{ENTRY}.lock", 5, "building debian", SHARED_LOCK_MODE):
            pass
    assert stat.S_IMODE(shadow.stat().st_mode) == 0o600


def _plant_entry(members: Members, shared: Path, disk: str) -> None:
    planted = members.run(
        members.attacker,
        ["python", "-c", PLANT, str(shared / ENTRY), disk, debian_recipe().recipe_hash()],
        shared,
    )
    assert planted.returncode == 0, planted.stderr


def test_an_entry_another_member_planted_is_refused_naming_her(
    members: Members, shared: Path, victims_key: Path
) -> None:
    _plant_entry(members, shared, str(victims_key))  # its disk: the victim's own key
    booted = members.run(members.victim, ["python", "-c", RESOLVE], shared)
    assert booted.returncode != 0, booted.stdout
    assert f"the cached image {ENTRY} is not booted" in booted.stderr
    assert f"belongs to {ATTACKER} (uid {members.attacker.uid}), who is not trusted" in (
        booted.stderr
    )
    assert f"add {ATTACKER} to ADARE_IMAGE_CACHE_TRUST" in booted.stderr


def test_a_trusted_members_manifest_naming_the_victims_key_is_refused(
    members: Members, shared: Path, victims_key: Path
) -> None:
    _plant_entry(members, shared, str(victims_key))
    booted = members.run(
        members.victim, ["python", "-c", RESOLVE], shared, ADARE_IMAGE_CACHE_TRUST=ATTACKER
    )
    assert booted.returncode != 0, booted.stdout
    assert (
        f"its manifest's 'disk' names {victims_key}, outside the image's directory "
        f"{shared / ENTRY}" in booted.stderr
    )


def test_a_disk_changed_after_the_victim_first_booted_it_is_refused(
    members: Members, shared: Path
) -> None:
    _plant_entry(members, shared, "disk.qcow2")
    trusting = {"ADARE_IMAGE_CACHE_TRUST": ATTACKER}
    first = members.run(members.victim, ["python", "-c", RESOLVE], shared, **trusting)
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip() == str(shared / ENTRY / "disk.qcow2")
    tamper = (
        "import os, sys; disk = sys.argv[1]; before = os.stat(disk)\n"
        "open(disk, 'r+b').write(b'THE')\n"  # same size
        "os.utime(disk, ns=(before.st_atime_ns, before.st_mtime_ns))\n"  # same mtime
    )
    changed = members.run(
        members.attacker, ["python", "-c", tamper, str(shared / ENTRY / "disk.qcow2")], shared
    )
    assert changed.returncode == 0, changed.stderr
    again = members.run(members.victim, ["python", "-c", RESOLVE], shared, **trusting)
    assert again.returncode != 0, again.stdout
    recorded = json.loads((shared / ENTRY / "adare-image.json").read_text())["disk_sha256"]
    assert f"its manifest says {recorded} (the disk changed after it was built)" in again.stderr
