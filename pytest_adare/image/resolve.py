"""From what the user wrote (``--adare-vm``) to an :class:`ImageManifest`.

A manifest file, a directory holding one, a bare disk (its format read by
``qemu-img``), or a built-in name built on first use and cached::

    manifest = resolve_image("debian")             # built on first use, then cached
    manifest = resolve_image("/images/win.qcow2")  # bare disk, firmware boot
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from pytest_adare.errors import ImageError
from pytest_adare.image.cache import cached_builtin_image
from pytest_adare.image.manifest import (
    BUILTIN_IMAGES,
    DISK_FORMATS,
    MANIFEST_NAME,
    ImageManifest,
    Progress,
    load_manifest,
)


def disk_format(path: Path) -> str:
    """``qcow2`` or ``raw``: by extension, else by ``qemu-img info``.

    :raise ImageError: the format is neither, or ``qemu-img`` cannot tell.
    """
    suffix = path.suffix.lower().lstrip(".")
    if suffix in ("qcow2", "raw"):
        return suffix
    try:
        info = subprocess.run(
            ["qemu-img", "info", "--output=json", str(path)],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
    except FileNotFoundError as exc:
        raise ImageError("qemu-img not found; install the apt package qemu-utils") from exc
    except subprocess.CalledProcessError as exc:
        raise ImageError(f"qemu-img cannot read {path}: {exc.stderr.strip()}") from exc
    fmt = str(json.loads(info.stdout).get("format"))
    if fmt not in DISK_FORMATS:
        raise ImageError(f"{path}: disk format {fmt!r} is not supported (use qcow2 or raw)")
    return fmt


def bare_disk_manifest(path: Path) -> ImageManifest:
    """Defaults for a disk without a manifest: firmware boot, Linux, no baked agent."""
    return ImageManifest(name=path.stem, disk=path.resolve(), format=disk_format(path))


def resolve_image(spec: str | Path, progress: Progress | None = None) -> ImageManifest:
    """Turn what the user wrote (``--adare-vm``) into a manifest.

    ``spec`` is a manifest file, a directory holding ``adare-image.json``, a bare
    disk image (qcow2/raw), or a built-in name (``debian``, ``debian-desktop``),
    which is built on first use and cached (this needs root; ``progress`` gets
    one line per build phase).

    :raise ImageError: nothing usable at ``spec``, or the build failed.
    """
    text = str(spec)
    path = Path(text).expanduser()
    if text in BUILTIN_IMAGES and not path.exists():
        return load_manifest(cached_builtin_image(text, progress=progress))
    if path.is_dir():
        manifest = path / MANIFEST_NAME
        if not manifest.is_file():
            raise ImageError(f"{path} is a directory without {MANIFEST_NAME}")
        return load_manifest(manifest)
    if path.is_file():
        if path.suffix == ".json":
            return load_manifest(path)
        return bare_disk_manifest(path)
    raise ImageError(
        f"no image at {text!r}: give a manifest ({MANIFEST_NAME}), its directory, a qcow2/raw "
        f"disk, or a built-in name ({', '.join(BUILTIN_IMAGES)})"
    )
