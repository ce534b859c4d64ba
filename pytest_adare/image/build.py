"""``adare-image build debian [--desktop]``: a bootable Debian guest from Debian packages.

Phases (one progress line each): check the host, mmdebstrap the root file
system, lay out the adare init and the baked agent, cut the initrd, make the
ext4 disk with ``mkfs.ext4 -d`` (no mounting), convert it to qcow2, write the
manifest. Everything happens in a temporary sibling directory that is renamed
into place at the end, so a half-built image is never seen at ``out``.

Root builds as root; an ordinary user builds the same image as root of a user
namespace over their subordinate ids (``image.userns``): no loop device, no mount.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from adare_guest.config import VIRTIO_PORT_NAME
from pytest_adare.cache_dir import cache_root
from pytest_adare.errors import ImageError
from pytest_adare.file_hash import file_sha256
from pytest_adare.image.agent_bundle import build_agent_bundle
from pytest_adare.image.build_claim import PARTIAL_MARK, WORK_PREFIX, Claim, partial_prefix, reap
from pytest_adare.image.build_failure import build_failure_cause
from pytest_adare.image.initrd import build_initrd
from pytest_adare.image.manifest import AgentSpec, ImageManifest, write_manifest
from pytest_adare.image.recipe import DEFAULT_MIRROR, Recipe, debian_recipe
from pytest_adare.image.rootfs import (
    bootstrap,
    depmod,
    install_adare_layout,
    merge_overlay,
    remove_tree,
    run_logged,
    strip_rootfs,
    take_kernel,
    tree_size,
)
from pytest_adare.image.userns import BuildPrivilege, build_privilege

SERIAL_DEVICE = f"/dev/virtio-ports/{VIRTIO_PORT_NAME}"
"""The agent's serial link in the built-in images: a virtio-serial port (the host also
speaks it over the UART ttyS1 for images whose manifest says so)."""
# (command, apt package) the build needs on the host.
HOST_TOOLS = (("mmdebstrap", "mmdebstrap"), ("mkfs.ext4", "e2fsprogs"), ("qemu-img", "qemu-utils"))
_MIN_FREE_MIB = 256

Progress = Callable[[str], None]


def check_host() -> BuildPrivilege:
    """Who the build's root is (the host's, or a user namespace's for an ordinary user).

    :raise ImageError: a needed host tool is missing (names apt packages), or an ordinary
        user cannot get a user namespace here (names the fix and the root alternative).
    """
    missing = [package for tool, package in HOST_TOOLS if shutil.which(tool) is None]
    if missing:
        raise ImageError(
            "building a Debian image needs tools that are not installed; run: "
            f"apt-get install {' '.join(missing)}"
        )
    return build_privilege()


class PhaseClock:
    """Times build phases and reports one line per phase to ``progress``."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self.start = time.monotonic()
        self.phases: dict[str, float] = {}

    @contextmanager
    def phase(self, name: str, detail: str = "") -> Iterator[None]:
        began = time.monotonic()
        yield
        took = time.monotonic() - began
        self.phases[name] = round(took, 2)
        total = time.monotonic() - self.start
        suffix = f"  ({detail})" if detail else ""
        self.progress(f"[{total:6.1f}s] {name:<10} {took:6.1f} s{suffix}")


def make_disk(rootfs: Path, work: Path, out: Path, log: Path, privilege: BuildPrivilege) -> None:
    """ext4 (from ``rootfs``, without mounting; ``mkfs.ext4`` runs as the build's root,
    so the files keep root's ownership) -> qcow2 at ``out``."""
    used_mib = tree_size(rootfs, privilege) // (1 << 20)
    size_mib = max(1024, used_mib * 2 + _MIN_FREE_MIB)
    raw = work / "root.raw"
    with raw.open("wb") as handle:
        handle.truncate(size_mib << 20)
    # Inode tables zeroed now: otherwise the guest kernel's lazy init writes them at boot.
    run_logged(
        privilege.wrap(
            [
                "mkfs.ext4",
                "-q",
                "-F",
                "-L",
                "adare-root",
                "-d",
                str(rootfs),
                "-E",
                "lazy_itable_init=0,lazy_journal_init=0",
                str(raw),
            ]
        ),
        log,
        "mkfs.ext4",
        timeout=600,
    )
    run_logged(
        ["qemu-img", "convert", "-O", "qcow2", str(raw), str(out)],
        log,
        "qemu-img convert",
        timeout=600,
    )
    raw.unlink()


def recipe_steps(recipe: Recipe) -> dict[str, Any] | None:
    """What a user's recipe added to the built-in image, for the manifest (None: nothing)."""
    base = debian_recipe(desktop=recipe.desktop, suite=recipe.suite, init=recipe.init)
    if recipe == base:
        return None
    return {
        "base": base.name,
        "base_recipe_hash": base.recipe_hash(),
        "install": [p for p in recipe.packages if p not in base.packages],
        "files": [copy.hashed() for copy in recipe.files],
        "provision": list(recipe.provision),
        **({"services": list(recipe.services)} if recipe.services else {}),
    }


def readable_by_all(directory: Path) -> None:
    """Modes that let every user of a shared cache read the image, whatever the umask."""
    directory.chmod(0o755)
    for path in directory.iterdir():
        if path.is_file() and not path.is_symlink():
            path.chmod(0o644)


def _replace_dir(built: Path, out: Path) -> None:
    if out.exists():
        old = out.with_name(f".{out.name}.old-{os.getpid()}")
        out.rename(old)
        built.rename(out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        built.rename(out)


def build_log(out: Path) -> Path:
    """Where the build of ``out`` logs: in the user's own cache, so the log a failed build
    names is still there (a successful build moves it into the image)."""
    logs = cache_root() / "build-logs"
    logs.mkdir(parents=True, exist_ok=True)
    return logs / f"{out.name}.log"


def reap_dead_builds(images: Path, privilege: BuildPrivilege) -> None:
    """Remove what builds of this user that were killed outright left: partial image
    directories in ``images`` and work directories (mounts included) in the temp dir."""
    reap(images, ".", lambda path: shutil.rmtree(path, ignore_errors=True), contains=PARTIAL_MARK)
    reap(Path(tempfile.gettempdir()), WORK_PREFIX, lambda path: remove_tree(path, privilege))


def build_image(
    recipe: Recipe, out: Path, *, mirror: str = DEFAULT_MIRROR, progress: Progress = print
) -> Path:
    """Build ``recipe`` into the directory ``out``; returns the manifest path.

    :raise ImageError: the host lacks a tool or root, or a build step failed
        (the message holds the tail of the build log).
    """
    clock = PhaseClock(progress)
    with clock.phase("host", "root, mmdebstrap, mkfs.ext4, qemu-img"):
        privilege = check_host()
        bundle = build_agent_bundle(gui=recipe.desktop)
    out = out.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    reap_dead_builds(out.parent, privilege)
    stage_claim = Claim(out.parent, partial_prefix(out))
    work_claim = Claim(Path(tempfile.gettempdir()), WORK_PREFIX)
    stage, work = stage_claim.path, work_claim.path
    # mmdebstrap's unshare-mode root is a subordinate id: it must pass through ``work``.
    work.chmod(0o711)
    stage.chmod(0o755)
    log = build_log(out)
    log.write_bytes(b"")
    try:
        rootfs = work / "rootfs"
        with clock.phase(
            "rootfs",
            f"mmdebstrap {recipe.suite}, {len(recipe.packages) + 1} "
            "packages and their dependencies",
        ):
            try:
                hold = (work_claim.fd,)
                bootstrap(recipe, rootfs, work / "kernel", mirror, log, privilege, hold)
            except ImageError as exc:
                cause = build_failure_cause(log.read_text(errors="replace"), recipe, mirror)
                raise ImageError(f"{cause}\n{exc}" if cause else str(exc)) from exc
        init = "busybox init, qemu-ga" if recipe.init == "busybox" else "systemd units"
        with clock.phase("layout", f"{init}, baked agent"):
            overlay = work / "overlay"
            install_adare_layout(recipe, rootfs, overlay, bundle.path, SERIAL_DEVICE)
            modules = take_kernel(recipe, work / "kernel", overlay, stage)
            merge_overlay(overlay, rootfs, log, privilege)
            if (overlay / "lib/modules").is_dir():
                depmod(rootfs, modules, log, privilege)
        with clock.phase("initrd"):
            loaded = build_initrd(
                modules,
                recipe.initrd_modules,
                rootfs / "bin/busybox",
                recipe.script("initrd-init.sh"),
                stage / "initrd.gz",
            )
            strip_rootfs(rootfs, log, privilege)
        with clock.phase("disk", "mkfs.ext4 -d, qemu-img convert"):
            make_disk(rootfs, work, stage / "disk.qcow2", log, privilege)
        manifest = ImageManifest(
            name=recipe.name,
            disk=stage / "disk.qcow2",
            format="qcow2",
            kernel=stage / "vmlinuz",
            initrd=stage / "initrd.gz",
            append=recipe.append,
            agent=AgentSpec(
                serial_device=SERIAL_DEVICE,
                baked=True,
                version=bundle.version,
                bundle_hash=bundle.bundle_hash,
                fw_cfg=True,
                initrd_handoff=True,
            ),
            desktop=recipe.desktop,
            display=recipe.display,
            memory_mib=recipe.memory_mib,
            disk_sha256=file_sha256(stage / "disk.qcow2"),
            recipe_hash=recipe.recipe_hash(),
            user=recipe.user,
            ready_command=recipe.ready_command,
            steps=recipe_steps(recipe),
            built_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        )
        write_manifest(manifest, stage)
        with log.open("a") as handle:
            handle.write(f"initrd modules: {' '.join(loaded)}\nphases: {clock.phases}\n")
        shutil.move(log, stage / "build.log")
        readable_by_all(stage)
        _replace_dir(stage, out)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    finally:
        stage_claim.release()
        remove_tree(work, privilege)
        shutil.rmtree(work, ignore_errors=True)  # what the build's root could not unlink
        work_claim.release()
    manifest_path = out / "adare-image.json"
    progress(f"[{time.monotonic() - clock.start:6.1f}s] done       manifest {manifest_path}")
    return manifest_path
