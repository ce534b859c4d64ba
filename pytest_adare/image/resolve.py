"""From what the user wrote (``--adare-vm``) to an :class:`ImageManifest`.

A manifest file, a directory holding one, a bare disk (its format read by
``qemu-img``), or a built-in name or a recipe (``.toml``) built on first use and cached::

    manifest = resolve_image("debian")             # built on first use, then cached
    manifest = resolve_image("debian:bullseye")    # the same recipe on another Debian suite
    manifest = resolve_image("/images/win.qcow2")  # bare disk, firmware boot
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from dataclasses import replace
from pathlib import Path

from pytest_adare.errors import ImageError
from pytest_adare.image.cache import (
    cached_image_manifest,
    cached_manifest,
    in_image_cache,
    is_cached,
)
from pytest_adare.image.convert import SNAPSHOT_BLOCKING_FORMATS, qcow2_copy
from pytest_adare.image.manifest import (
    BUILTIN_IMAGES,
    DISK_FORMATS,
    MANIFEST_NAME,
    ImageManifest,
    Progress,
    load_manifest,
)
from pytest_adare.image.partition_table import HEAD_BYTES, Firmware, firmware_for
from pytest_adare.image.recipe import DEFAULT_MIRROR, builtin_recipe
from pytest_adare.image.recipe_build import BootedBuilder, BuildRequest, recipe_image
from pytest_adare.image.recipe_file import is_recipe, load_recipe
from pytest_adare.image.suites import check_suite, split_suite


def _qemu_img(argv: list[str], path: Path) -> str:
    try:
        done = subprocess.run(
            ["qemu-img", *argv], capture_output=True, text=True, timeout=30, check=True
        )
    except FileNotFoundError as exc:
        raise ImageError("qemu-img not found; install the apt package qemu-utils") from exc
    except subprocess.CalledProcessError as exc:
        raise ImageError(f"qemu-img cannot read {path}: {exc.stderr.strip()}") from exc
    return done.stdout


def disk_format(path: Path) -> str:
    """The disk's format as ``qemu-img info`` detects it (one of ``DISK_FORMATS``).

    ``.qcow2`` / ``.raw`` are taken from the name (a raw disk's format cannot be probed
    safely: its first bytes could look like anything).

    :raise ImageError: a format QEMU cannot use as a backing file, or ``qemu-img`` cannot tell.
    """
    suffix = path.suffix.lower().lstrip(".")
    if suffix in ("qcow2", "raw"):
        return suffix
    fmt = str(json.loads(_qemu_img(["info", "--output=json", str(path)], path)).get("format"))
    if fmt not in DISK_FORMATS:
        raise ImageError(
            f"{path}: disk format {fmt!r} is not supported (use one of {', '.join(DISK_FORMATS)})"
        )
    return fmt


def disk_head(path: Path, fmt: str) -> bytes:
    """The first ``HEAD_BYTES`` the guest sees on the disk, read through ``qemu-img dd``."""
    with tempfile.TemporaryDirectory(prefix="adare-head-") as tmp:
        out = Path(tmp) / "head"
        _qemu_img(
            ["dd", "-f", fmt, "-O", "raw", f"bs={HEAD_BYTES}", "count=1", f"if={path}",
             f"of={out}"],
            path,
        )  # fmt: skip
        return out.read_bytes()


def detect_firmware(path: Path, fmt: str) -> tuple[Firmware, str]:
    """``bios`` or ``uefi`` for a bare disk, from its partition table, and why."""
    firmware, why = firmware_for(disk_head(path, fmt))
    return firmware, f"detected: {why}"


def bare_disk_manifest(path: Path) -> ImageManifest:
    """Defaults for a disk without a manifest: firmware boot (BIOS or UEFI, read from the
    partition table), Linux, no baked agent."""
    fmt = disk_format(path)
    firmware, why = detect_firmware(path, fmt)
    return ImageManifest(
        name=path.stem, disk=path.resolve(), format=fmt, firmware=firmware, firmware_reason=why
    )


def snapshot_ready(manifest: ImageManifest, progress: Progress | None = None) -> ImageManifest:
    """``manifest`` with a disk QEMU can snapshot over: a vmdk/vdi/vhdx/vpc disk is
    replaced by its cached qcow2 copy (``image.convert``)."""
    if manifest.format not in SNAPSHOT_BLOCKING_FORMATS:
        return manifest
    copy = qcow2_copy(manifest.disk, manifest.format, progress)
    return replace(manifest, disk=copy, format="qcow2")


def check_builtin(spec: str, mirror: str = DEFAULT_MIRROR) -> None:
    """Check a suite-named built-in (``debian:trixie``) without building it: cached, or
    a suite the mirror has. Anything else passes (the resolver judges it when used).

    :raise ImageError: a malformed suite, or one the mirror does not have.
    """
    named = split_suite(spec)
    if named is not None and not Path(spec).exists() and not is_cached(builtin_recipe(spec)):
        check_suite(named[1], mirror)


def _manifest_at(path: Path) -> ImageManifest:
    """A manifest the user named; one in the image cache passes the cache's checks."""
    return cached_manifest(path.resolve()) if in_image_cache(path) else load_manifest(path)


def resolve_image(
    spec: str | Path,
    progress: Progress | None = None,
    *,
    booted: BootedBuilder | None = None,
    request: BuildRequest | None = None,
) -> ImageManifest:
    """Turn what the user wrote (``--adare-vm``) into a manifest.

    ``spec`` is a manifest file, a directory holding ``adare-image.json``, a bare
    disk image (any of ``DISK_FORMATS``), a built-in name (``debian``, ``debian-desktop``,
    either with a Debian suite: ``debian:bullseye``), or a recipe (``.toml``); the last
    two are built on first use and cached (``progress`` gets one line per build phase).
    A recipe over a base that is not built in is built by booting the base with
    ``booted`` (``image_provision.build_on_disk``).

    :raise ImageError: nothing usable at ``spec``, bad recipe, or the build failed.
    """
    text = str(spec)
    path = Path(text).expanduser()
    if not path.exists():
        if text in BUILTIN_IMAGES or split_suite(text) is not None:
            return cached_image_manifest(builtin_recipe(text), progress=progress)
    if is_recipe(text):
        built = recipe_image(
            load_recipe(text),
            resolve_base=lambda base: resolve_image(base, progress),
            booted=booted,
            request=request,
            progress=progress,
        )
        return cached_manifest(built)
    if path.is_dir():
        manifest = path / MANIFEST_NAME
        if not manifest.is_file():
            raise ImageError(f"{path} is a directory without {MANIFEST_NAME}")
        return snapshot_ready(_manifest_at(manifest), progress)
    if path.is_file():
        found = _manifest_at(path) if path.suffix == ".json" else bare_disk_manifest(path)
        return snapshot_ready(found, progress)
    raise ImageError(
        f"no image at {text!r}: give a manifest ({MANIFEST_NAME}), its directory, a disk "
        f"({', '.join(DISK_FORMATS)}), a recipe (.toml), or a built-in name "
        f"({', '.join(BUILTIN_IMAGES)}, optionally with a Debian suite: debian:bullseye)"
    )
