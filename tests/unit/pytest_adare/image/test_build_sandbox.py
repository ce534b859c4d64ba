"""The sandbox a recipe's files and provision steps run in (``image/sandbox_enter.py``),
probed as a hostile step would, on a tiny root (the host's static busybox): no host
process, file, disk or mount in reach, no way to undo it (issue 34 item 2). As root, as
root of a user namespace (mmdebstrap's unshare mode), and with a host directory's
descriptor inherited. And the staging of a recipe's files: private (item 3).
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_adare.image.recipe_build import extended_recipe
from pytest_adare.image.recipe_file import load_recipe
from pytest_adare.image.rootfs import SANDBOX, _recipe_hooks

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not Path("/bin/busybox").is_file(),
    reason="namespaces and mounts as root, and a static busybox for the tiny root",
)

# Each way out that works prints "ESCAPE ..."; the last line proves the probe ran to its end.
PROBE = r"""
B=/bin/busybox
for p in /proc/[0-9]*; do
  $B cat "$p/root$SECRET" >/dev/null 2>&1 && echo "ESCAPE $p/root is the host's /"
  $B cat "$p/cwd$SECRET" >/dev/null 2>&1 && echo "ESCAPE $p/cwd is on the host"
done
$B cat "$SECRET" >/dev/null 2>&1 && echo "ESCAPE the secret is in reach"
[ -n "$($B find /dev -type b)" ] && echo "ESCAPE a block device in /dev"
$B mknod /tmp/disk b $DISK 2>/dev/null && echo "ESCAPE mknod of the host's disk"
$B umount /proc 2>/dev/null && echo "ESCAPE /proc could be unmounted"
$B mount -t proc proc /mnt 2>/dev/null && echo "ESCAPE a mount"
echo 1 2>/dev/null > /proc/sys/kernel/sysrq && echo "ESCAPE /proc/sys is writable"
echo h 2>/dev/null > /proc/sysrq-trigger && echo "ESCAPE sysrq"  # h: the help, harmless
[ -e /sys/block ] && echo "ESCAPE the host's /sys"
$B ls /proc/$$/fd > /tmp/fds  # the shell's own descriptors, listed from outside it
for fd in $($B cat /tmp/fds); do
  target=$($B readlink /proc/$$/fd/$fd)  # empty: the shell's own, closed since
  case "$fd" in 0|1|2|3) ;; *) [ -n "$target" ] && echo "ESCAPE inherited fd $fd: $target";; esac
done
echo "pid $$, handed: $($B cat /proc/self/fd/3)"
"""


@pytest.fixture
def tiny_root(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    for name in ("bin", "proc", "sys", "dev", "tmp", "mnt"):
        (root / name).mkdir(parents=True)
    shutil.copy2("/bin/busybox", root / "bin/busybox")
    (root / "bin/sh").symlink_to("busybox")
    return root


def _probe(
    root: Path, tmp_path: Path, wrap: list[str], *, sandbox: bool = True, **popen: object
) -> str:
    secret = tmp_path / "host-secret"
    secret.write_text("host secret\n")
    secret.chmod(0o600)
    handed = tmp_path / "handed"
    handed.write_text("recipe file\n")
    disk = os.stat("/").st_dev
    env = {"SECRET": str(secret), "DISK": f"{os.major(disk)} {os.minor(disk)}"}
    script = "".join(f"{key}='{value}'\n" for key, value in env.items()) + PROBE
    argv = [sys.executable, "-I", str(SANDBOX), str(root), "--read", str(handed), "--"]
    if not sandbox:  # how steps ran before: chroot, the recipe file open as descriptor 3
        argv = ["sh", "-c", f'exec 3< {handed}; exec chroot "$0" "$@"', str(root)]
    done = subprocess.run(
        [*wrap, *argv, "/bin/sh", "-c", script],
        capture_output=True, text=True, timeout=60, check=False, **popen,  # type: ignore[call-overload]
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_a_step_as_root_reaches_no_host_process_file_disk_or_mount(
    tiny_root: Path, tmp_path: Path
) -> None:
    out = _probe(tiny_root, tmp_path, [])
    assert "ESCAPE" not in out, out
    assert out.endswith("pid 1, handed: recipe file\n"), out
    assert not (tiny_root / "dev/null").exists()  # its /dev was a tmpfs, now gone


def test_the_same_as_root_of_a_user_namespace(tiny_root: Path, tmp_path: Path) -> None:
    if shutil.which("unshare") is None:
        pytest.skip("needs util-linux unshare")
    out = _probe(tiny_root, tmp_path, ["unshare", "--user", "--map-root-user", "--mount"])
    assert "ESCAPE" not in out, out
    assert out.endswith("pid 1, handed: recipe file\n"), out


def test_the_probe_finds_the_ways_out_a_bare_chroot_leaves(tiny_root: Path, tmp_path: Path) -> None:
    # The old hooks: chroot into a root where mmdebstrap had mounted the host's /proc.
    subprocess.run(["mount", "-t", "proc", "proc", str(tiny_root / "proc")], check=True)
    try:
        out = _probe(tiny_root, tmp_path, [], sandbox=False)
    finally:
        # The probe's own "ESCAPE a mount" lands in the host's mount table: undo it too,
        # or the host keeps a procfs under this test's directory (and pytest cannot remove it).
        subprocess.run(["umount", "-l", str(tiny_root / "mnt")], check=False, capture_output=True)
        subprocess.run(["umount", "-l", str(tiny_root / "proc")], check=False)
    assert "is the host's /" in out and "ESCAPE mknod" in out and "ESCAPE a mount" in out, out


def test_a_host_directory_descriptor_the_hook_inherits_does_not_reach_the_step(
    tiny_root: Path, tmp_path: Path
) -> None:
    # mmdebstrap hands its hooks what it inherited (the build's claim on its work
    # directory): an open directory of the host is a way back out (fchdir).
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        out = _probe(tiny_root, tmp_path, [], pass_fds=(fd,))
    finally:
        os.close(fd)
    assert "ESCAPE" not in out, out


def test_what_was_mounted_in_the_root_is_detached_not_handed_on(
    tiny_root: Path, tmp_path: Path
) -> None:
    # As mmdebstrap leaves it in root mode: the host's /proc and /sys mounted in the root.
    subprocess.run(["mount", "-t", "proc", "proc", str(tiny_root / "proc")], check=True)
    subprocess.run(["mount", "--rbind", "/sys", str(tiny_root / "sys")], check=True)
    try:
        out = _probe(tiny_root, tmp_path, [])
    finally:
        subprocess.run(["umount", "-R", "-l", str(tiny_root / "sys")], check=False)
        subprocess.run(["umount", "-l", str(tiny_root / "proc")], check=False)
    assert "ESCAPE" not in out, out


def test_a_recipes_files_are_staged_private_with_their_content_checked(tmp_path: Path) -> None:
    recipe_dir = tmp_path / "recipe"
    recipe_dir.mkdir()
    (recipe_dir / "secret.txt").write_text("private\n")
    (recipe_dir / "secret.txt").chmod(0o600)
    (recipe_dir / "r.toml").write_text(
        'base = "debian"\nprovision = ["true"]\n'
        '[[files]]\nsource = "secret.txt"\ndest = "/etc/secret"\n'
    )
    recipe = extended_recipe(load_recipe(recipe_dir / "r.toml"))
    scratch = tmp_path / "hooks"
    scratch.mkdir(mode=0o700)
    hooks = _recipe_hooks(recipe, scratch, sys.executable)
    staged = scratch / "files/0"
    assert stat.S_IMODE(staged.stat().st_mode) == 0o600
    assert stat.S_IMODE(staged.parent.stat().st_mode) == 0o700
    assert staged.read_text() == "private\n"
    # Nothing of the recipe is written into the root by the host: no "$1/..." paths.
    assert all('"$1/' not in hook for hook in hooks), hooks
    assert all(str(SANDBOX.name) in hook for hook in hooks)
    (recipe_dir / "secret.txt").write_text("swapped after the recipe was read\n")
    with pytest.raises(Exception, match="changed since its recipe was read"):
        (tmp_path / "again").mkdir()
        _recipe_hooks(recipe, tmp_path / "again", sys.executable)
