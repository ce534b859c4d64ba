"""What mmdebstrap leaves in a root-mode build's tree: its ``/proc`` stays mounted when its
``umount`` finds the target busy (it only warns, ``W: umount /proc failed``, and reports
success); the build detaches it before it sizes and copies the tree, so the host's
``/proc`` never goes into an image. Seen in a fresh-cache run building debian-systemd:
``find`` over the tree failed inside the host's ``/proc``."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from pytest_adare.errors import ImageError
from pytest_adare.image.build_claim import mounts_inside
from pytest_adare.image.rootfs import detach_leftover_mounts, kept_kernel_packages, tree_size
from pytest_adare.image.userns import HostRoot


def test_a_tree_without_mounts_is_left_alone_and_sized(tmp_path: Path) -> None:
    rootfs = tmp_path / "rootfs"
    (rootfs / "etc").mkdir(parents=True)
    (rootfs / "etc/hostname").write_bytes(b"x" * 1000)
    (rootfs / "big").write_bytes(b"y" * 5000)
    log = tmp_path / "build.log"
    log.write_text("")
    detach_leftover_mounts(rootfs, log)
    assert log.read_text() == ""
    assert tree_size(rootfs, HostRoot()) == 6000


def test_a_tree_find_cannot_read_is_an_image_error_with_finds_words(tmp_path: Path) -> None:
    with pytest.raises(ImageError, match=r"cannot size the root file system(.|\n)*No such file"):
        tree_size(tmp_path / "missing", HostRoot())


@pytest.mark.skipif(os.geteuid() != 0, reason="mounts need root")
def test_a_busy_proc_that_mmdebstrap_left_is_detached_before_the_tree_is_read(
    tmp_path: Path,
) -> None:
    rootfs = tmp_path / "rootfs"
    (rootfs / "proc").mkdir(parents=True)
    (rootfs / "usr").mkdir()
    (rootfs / "usr/file").write_bytes(b"z" * 4096)
    log = tmp_path / "build.log"
    log.write_text("")
    subprocess.run(["mount", "-t", "proc", "-o", "ro", "proc", str(rootfs / "proc")], check=True)
    # What made mmdebstrap's umount fail: a process with its working directory in there.
    holder = subprocess.Popen(["sleep", "60"], cwd=rootfs / "proc")
    try:
        busy = subprocess.run(["umount", str(rootfs / "proc")], capture_output=True, text=True)
        assert busy.returncode != 0 and "busy" in busy.stderr
        detach_leftover_mounts(rootfs, log)
        assert mounts_inside(rootfs) == []
        assert f"detaching what mmdebstrap left mounted: {rootfs / 'proc'}" in log.read_text()
        assert tree_size(rootfs, HostRoot()) == 4096
    finally:
        holder.kill()
        holder.wait()
        subprocess.run(["umount", "-l", str(rootfs / "proc")], capture_output=True, check=False)


def test_a_recipe_that_installs_a_kernel_only_package_keeps_what_it_needs() -> None:
    # dpkg refuses to purge what a kept package depends on: the build failed.
    everything = {"initramfs-tools", "initramfs-tools-core", "klibc-utils", "libklibc",
                  "linux-base", "cpio", "udev"}  # fmt: skip
    assert kept_kernel_packages(("jq", "initramfs-tools")) == everything
    assert kept_kernel_packages(("klibc-utils",)) == {"klibc-utils", "libklibc"}
    assert kept_kernel_packages(("udev", "python3")) == {"udev"}
    assert kept_kernel_packages(("python3",)) == set()
