"""A tiny initrd: static busybox, a few kernel modules and a shell ``/init``.

Debian's cloud kernel has virtio as modules, so mounting a virtio disk needs an
initrd; this one is a few hundred KiB (the kernel's own initramfs is ~30 MiB)
and takes well under a second to run under TCG.
"""

from __future__ import annotations

import gzip
import io
import lzma
from collections.abc import Iterable, Mapping
from pathlib import Path

from pytest_adare.errors import ImageError


def module_load_order(modules_dir: Path, wanted: Iterable[str]) -> list[str]:
    """Relative ``.ko`` paths of ``wanted`` and their dependencies, dependencies first.

    Built-in modules (``modules.builtin``) are skipped.

    :raise ImageError: a wanted module is neither a module nor built in.
    """
    deps: dict[str, list[str]] = {}
    for line in (modules_dir / "modules.dep").read_text().splitlines():
        target, _, rest = line.partition(":")
        deps[target] = rest.split()
    by_name = {_module_name(path): path for path in deps}
    builtin = {_module_name(p) for p in (modules_dir / "modules.builtin").read_text().split()}
    order: list[str] = []

    def visit(path: str) -> None:
        if path in order:
            return
        for dep in reversed(deps[path]):
            visit(dep)
        order.append(path)

    for name in wanted:
        key = name.replace("-", "_")
        if key in by_name:
            visit(by_name[key])
        elif key not in builtin:
            raise ImageError(f"kernel module {name} is not in {modules_dir}")
    return order


def _module_name(path: str) -> str:
    base = path.rsplit("/", 1)[-1]
    return base.split(".ko", 1)[0].replace("-", "_")


def _module_bytes(path: Path) -> bytes:
    data = path.read_bytes()
    if path.name.endswith(".ko.xz"):
        return lzma.decompress(data)
    if path.name.endswith(".ko"):
        return data
    raise ImageError(f"{path}: unsupported module compression (expected .ko or .ko.xz)")


class CpioWriter:
    """Writes a ``newc`` cpio archive (the format the kernel unpacks as initramfs)."""

    def __init__(self) -> None:
        self._out = io.BytesIO()
        self._ino = 0

    def _header(self, name: str, mode: int, size: int, rdev: tuple[int, int] = (0, 0)) -> None:
        self._ino += 1
        fields = (self._ino, mode, 0, 0, 1, 0, size, 0, 0, *rdev, len(name) + 1, 0)
        self._out.write(b"070701" + b"".join(b"%08X" % f for f in fields))
        self._out.write(name.encode() + b"\0")
        self._pad()

    def _pad(self) -> None:
        self._out.write(b"\0" * (-self._out.tell() % 4))

    def directory(self, name: str) -> None:
        self._header(name, 0o040755, 0)

    def char_device(self, name: str, major: int, minor: int) -> None:
        self._header(name, 0o020600, 0, (major, minor))

    def file(self, name: str, data: bytes, mode: int = 0o644) -> None:
        self._header(name, 0o100000 | mode, len(data))
        self._out.write(data)
        self._pad()

    def finish(self) -> bytes:
        self._header("TRAILER!!!", 0, 0)
        return self._out.getvalue()


def build_initrd(
    modules_dir: Path, wanted: Iterable[str], busybox: Path, init_script: bytes, out: Path
) -> list[str]:
    """Write a gzip'ed initrd to ``out``; returns the module names it loads, in order."""
    order = module_load_order(modules_dir, wanted)
    cpio = CpioWriter()
    for directory in ("bin", "dev", "proc", "sys", "newroot", "modules"):
        cpio.directory(directory)
    cpio.char_device("dev/console", 5, 1)
    cpio.file("bin/busybox", busybox.read_bytes(), 0o755)
    cpio.file("init", init_script, 0o755)
    names = [_module_name(path) for path in order]
    for path, name in zip(order, names, strict=True):
        cpio.file(f"modules/{name}.ko", _module_bytes(modules_dir / path))
    cpio.file("modules/order", "".join(f"{n}\n" for n in names).encode())
    out.write_bytes(gzip.compress(cpio.finish(), compresslevel=6, mtime=0))
    return names


HANDOFF_FILES = ("config.json", "bundle.pyz")


def handoff_initrd(base: Path, files: Mapping[str, Path], out: Path) -> Path:
    """``base`` plus an appended archive holding ``files`` under ``/handoff/``.

    The kernel unpacks concatenated archives; the built-in images' initrd copies
    ``/handoff/config.json`` to ``/adare/run/`` and ``/handoff/bundle.pyz`` over the
    baked agent. Loaded by the firmware with DMA, this is far faster than a guest
    reading fw_cfg (one port access per byte, re-skipped for every page).

    :raise ImageError: a name is not one the initrd knows.
    """
    cpio = CpioWriter()
    cpio.directory("handoff")
    for name, path in sorted(files.items()):
        if name not in HANDOFF_FILES:
            raise ImageError(f"unknown hand-off file {name!r} (known: {', '.join(HANDOFF_FILES)})")
        cpio.file(f"handoff/{name}", path.read_bytes())
    out.write_bytes(base.read_bytes() + gzip.compress(cpio.finish(), compresslevel=1, mtime=0))
    return out
