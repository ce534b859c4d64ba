"""A hostile recipe on a built-in base, built as root (as `sudo adare-image build` would):
its files land in the image whatever symlinks their destinations cross, and its
provision step, probing every way to the host it knows, finds none (issue 34 items 1-3).

Before, the files were copied by the host (``cp SRC "$1/"DEST``: Debian's absolute
``/var/run -> /run`` took the copy to the host's ``/run``) and the steps ran under a bare
``chroot`` with mmdebstrap's host ``/proc`` (``/proc/$PPID/root`` was the host's ``/``).
One console-image build, about two minutes under load.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
from pathlib import Path

import pytest
from image_files import debugfs_cat, debugfs_stat

from pytest_adare.image.recipe_build import recipe_image
from pytest_adare.image.recipe_file import load_recipe
from pytest_adare.image.resolve import resolve_image

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(os.geteuid() != 0, reason="the attack is on a build as root"),
]

# Every escape it finds is a line "ESCAPE ..."; any makes the step (and the build) fail.
PROBE = r"""
import hashlib, os, stat, sys
secret, shadow_sha, disk, copied = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
found = []
def reads(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None
pids = [p for p in os.listdir("/proc") if p.isdigit()]
for pid in [*pids, str(os.getppid())]:
    for link in ("root", "cwd"):
        if reads(f"/proc/{pid}/{link}{secret}") is not None:
            found.append(f"/proc/{pid}/{link} is the host's /")
        shadow = reads(f"/proc/{pid}/{link}/etc/shadow")
        if shadow is not None and hashlib.sha256(shadow).hexdigest() == shadow_sha:
            found.append(f"/proc/{pid}/{link}/etc/shadow is the host's")
if reads(secret) is not None:
    found.append(f"{secret} is readable")
for top, dirs, files in os.walk("/dev"):
    for name in files:
        if stat.S_ISBLK(os.lstat(os.path.join(top, name)).st_mode):
            found.append(f"block device {os.path.join(top, name)}")
try:  # making the node is already too much (opening it may be refused elsewhere)
    os.mknod("/tmp/adare-disk", stat.S_IFBLK | 0o600, disk)
    found.append("mknod of the host's disk")
except OSError:
    pass
try:  # the classic chroot escape: chroot into a subdirectory, climb out, chroot there
    os.makedirs("/tmp/adare-jail", exist_ok=True)
    keep = os.open("/", os.O_RDONLY)
    os.chroot("/tmp/adare-jail")
    os.fchdir(keep)
    for _ in range(64):
        os.chdir("..")
    os.chroot(".")
    if reads(secret) is not None:
        found.append("chroot escape reached the host")
except OSError:
    pass
caps = next(l for l in open("/proc/self/status") if l.startswith("CapEff:"))
for bit, name in ((21, "CAP_SYS_ADMIN"), (27, "CAP_MKNOD"), (16, "CAP_SYS_MODULE")):
    if int(caps.split()[1], 16) >> bit & 1:
        found.append(f"has {name}")
report = f"probe ran: {len(pids)} processes seen\n" + "".join(f"ESCAPE {f}\n" for f in found)
report += f"{copied}: {open(copied).read()}"
print(report, end="")
sys.exit(1 if found else 0)
"""


def test_a_hostile_recipe_reaches_nothing_of_the_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("ADARE_IMAGE_CACHE", raising=False)
    token = secrets.token_hex(6)
    secret = tmp_path / "host-secret"
    secret.write_text(f"host secret {token}\n")
    secret.chmod(0o600)
    recipe_dir = tmp_path / "recipe"
    recipe_dir.mkdir()
    (recipe_dir / "probe.py").write_text(PROBE)
    (recipe_dir / "through-var-run.txt").write_text(f"landed in the image {token}\n")
    private = recipe_dir / "private.txt"
    private.write_text("only root may read this\n")
    private.chmod(0o600)
    shadow = hashlib.sha256(Path("/etc/shadow").read_bytes()).hexdigest()
    root_disk = os.stat("/").st_dev
    copied = f"/var/run/adare-{token}"
    recipe = recipe_dir / "hostile.toml"
    recipe.write_text(
        f'base = "debian"\nname = "hostile-{token}"\n'
        f'provision = ["python3 /root/probe.py {secret} {shadow} {root_disk} {copied} '
        '> /root/probe.txt 2>&1; rc=$?; cat /root/probe.txt; exit $rc"]\n'
        '[[files]]\nsource = "probe.py"\ndest = "/root/probe.py"\n'
        # Debian's /var/run is an absolute symlink to /run: resolved on the host, the
        # copy would land in the host's /run.
        f'[[files]]\nsource = "through-var-run.txt"\ndest = "{copied}"\n'
        '[[files]]\nsource = "private.txt"\ndest = "/etc/adare-private"\n'
    )
    before = set(Path("/run").iterdir())
    manifest = recipe_image(load_recipe(recipe), resolve_base=resolve_image, booted=None)
    disk = manifest.parent / "disk.qcow2"
    try:
        assert not Path(f"/run/adare-{token}").exists()
        assert set(Path("/run").iterdir()) == before
        report = debugfs_cat(disk, "/root/probe.txt", tmp_path).decode()
        assert report.startswith("probe ran: ") and "ESCAPE" not in report, report
        # The copy went through the image's /var/run -> /run (mmdebstrap empties /run
        # at the end, so the provision step read it back).
        assert f"{copied}: landed in the image {token}\n" in report, report
        # The source's mode is kept (no mode given), whatever the staging's was.
        assert debugfs_stat(disk, "/etc/adare-private", tmp_path)["mode"] == 0o600
    finally:
        shutil.rmtree(manifest.parent, ignore_errors=True)
