"""Safety rules for uploaded test-function archives (a leaf: stdlib only).

The archive comes from the host but is treated as hostile: it is refused *as
a whole* when any member name is absolute, has a drive letter, a backslash or
a ``..`` component, is a symlink, or when the member count, the total
uncompressed size or the compression ratio is over its cap. The host checks
its own uploads with the same rules (``pytest_adare`` imports this module, not
the tool group).
"""

from __future__ import annotations

import io
import re
import shutil
import stat
import zipfile
import zlib
from pathlib import Path, PurePosixPath

MAX_MEMBERS = 10_000
"""Most entries an uploaded archive may hold."""
MAX_TOTAL_SIZE = 256 * 1024 * 1024
"""Most bytes an uploaded archive may expand to."""
MAX_RATIO = 200
"""Highest overall uncompressed/compressed ratio (zip-bomb guard) above :data:`RATIO_FLOOR`."""
RATIO_FLOOR = 1024 * 1024
"""Archives expanding to less than this are not ratio-checked (tiny files compress oddly)."""

_DRIVE = re.compile(r"^[A-Za-z]:")


class UnsafeArchive(ValueError):
    """The uploaded archive breaks a safety rule; nothing of it was extracted."""


def check_archive(archive: zipfile.ZipFile) -> list[zipfile.ZipInfo]:
    """Validate every member name and the size caps before anything is written.

    :raise UnsafeArchive: naming the first offending member or cap.
    """
    members = archive.infolist()
    if len(members) > MAX_MEMBERS:
        raise UnsafeArchive(f"archive has {len(members)} entries, more than {MAX_MEMBERS}")
    for info in members:
        _check_name(info)
    total = sum(info.file_size for info in members)
    if total > MAX_TOTAL_SIZE:
        raise UnsafeArchive(f"archive expands to {total} bytes, more than {MAX_TOTAL_SIZE}")
    compressed = max(1, sum(info.compress_size for info in members))
    if total > RATIO_FLOOR and total / compressed > MAX_RATIO:
        raise UnsafeArchive(
            f"archive compression ratio {total / compressed:.0f}:1 is above {MAX_RATIO}:1"
        )
    return members


def _check_name(info: zipfile.ZipInfo) -> None:
    name = info.filename
    if not name or "\x00" in name:
        raise UnsafeArchive(f"archive member with an empty or NUL name: {name!r}")
    if name.startswith("/") or _DRIVE.match(name):
        raise UnsafeArchive(f"archive member {name!r} has an absolute path")
    if "\\" in name:
        raise UnsafeArchive(f"archive member {name!r} contains a backslash")
    if ".." in PurePosixPath(name).parts:
        raise UnsafeArchive(f"archive member {name!r} contains '..'")
    if stat.S_ISLNK(info.external_attr >> 16):
        raise UnsafeArchive(f"archive member {name!r} is a symlink")


def extract_archive(data: bytes, destination: Path) -> list[str]:
    """Check, then extract the zip ``data`` into the new directory ``destination``.

    Sizes are enforced while writing too, so a member lying about its size in
    the header cannot exceed the caps. Returns the collection names found.

    :raise UnsafeArchive: refused archive (``destination`` is removed again).
    """
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile as exc:
        raise UnsafeArchive(f"not a zip archive: {exc}") from None
    with archive:
        members = check_archive(archive)
        destination.mkdir(parents=True)
        try:
            _write_members(archive, members, destination)
        except (zipfile.BadZipFile, zlib.error, EOFError) as exc:
            shutil.rmtree(destination, ignore_errors=True)
            raise UnsafeArchive(f"corrupt archive: {exc}") from None
        except BaseException:
            shutil.rmtree(destination, ignore_errors=True)
            raise
    collections = sorted(
        p.name for p in destination.iterdir() if p.is_dir() and (p / f"{p.name}.py").is_file()
    )
    if not collections:
        shutil.rmtree(destination, ignore_errors=True)
        raise UnsafeArchive("archive holds no collection (expected D/D.py at its top level)")
    return collections


def _write_members(
    archive: zipfile.ZipFile, members: list[zipfile.ZipInfo], destination: Path
) -> None:
    written = 0
    for info in members:
        target = destination.joinpath(*PurePosixPath(info.filename).parts)
        if info.is_dir():
            target.mkdir(parents=True, exist_ok=True)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        with archive.open(info) as source, open(target, "wb") as sink:
            while block := source.read(1 << 16):
                written += len(block)
                if written > MAX_TOTAL_SIZE:
                    raise UnsafeArchive(f"archive expands past {MAX_TOTAL_SIZE} bytes")
                sink.write(block)
