"""Copy the files a diff shows as created or modified out of the guest, safely.

::

    pulled = await pull_changed(guest, diff, Path("evidence"))   # or guest.pull_changed(...)

Each regular file lands at ``dest/<guest path>`` and ``dest/adare-evidence.json``
lists every file with its guest path, host path, host-computed sha256 and size,
what the guest claimed, and why anything was skipped.

The guest may run malware, so every guest path is untrusted: it is rebuilt
component by component (``..`` cannot climb above the root; ``\\`` and ``/``
both separate; drive letters become a directory; NUL is refused; components
longer than 255 bytes are shortened with a hash), checked to stay under
``dest`` after resolving, and written only where no symlink sits between
``dest`` and the file. A file larger than ``max_bytes`` is cut off and removed.

The manifest's name is reserved: a guest path whose first component is
``adare-evidence.json`` lands under ``adare-evidence.json~guest`` instead. The
manifest is written through a temporary file created exclusively (``O_EXCL``, a
random name), so no pulled file, whatever the guest named it (e.g.
``.adare-evidence.json.part``), can be overwritten or moved by it.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Protocol

from pytest_adare.errors import AdareError
from pytest_adare.forensics.diff import FsDiff

__all__ = ["MANIFEST_NAME", "EvidenceRecord", "UnsafeGuestPath", "contained_path", "pull_changed"]

MANIFEST_NAME = "adare-evidence.json"
MAX_COMPONENT_BYTES = 255
MAX_RELATIVE_BYTES = 3000  # PATH_MAX is 4096 on Linux; dest itself needs room too
DEFAULT_MAX_BYTES = 1024**3


class UnsafeGuestPath(AdareError):
    """A guest path cannot be placed under the evidence directory."""


class PullingGuest(Protocol):
    """What :func:`pull_changed` needs: the facade's chunked, verified ``pull``."""

    async def pull(
        self,
        guest_path: str,
        host_path: str | os.PathLike[str],
        *,
        progress: Callable[[int, int], None] | None = None,
    ) -> Path: ...


@dataclass
class EvidenceRecord:
    """One manifest row: ``status`` is ``pulled``, ``skipped`` or ``failed``."""

    guest_path: str
    status: str
    change: str
    host_path: str | None = None
    sha256: str | None = None
    size: int | None = None
    guest_size: int | None = None
    guest_sha256: str | None = None
    reason: str | None = None


def relative_evidence_path(guest_path: str) -> PurePosixPath:
    """The host-side relative path for a guest path; never absolute, never with ``..``.

    :raise UnsafeGuestPath: NUL in the path, or nothing left after normalising.
    """
    if "\0" in guest_path:
        raise UnsafeGuestPath(f"guest path {guest_path!r} contains NUL")
    parts: list[str] = []
    for raw in guest_path.replace("\\", "/").split("/"):
        if raw in ("", "."):
            continue
        if raw == "..":
            if parts:
                parts.pop()
            continue
        parts.append(_safe_component(raw, first=not parts))
    if not parts:
        raise UnsafeGuestPath(f"guest path {guest_path!r} names no file")
    relative = PurePosixPath(*parts)
    if len(os.fsencode(str(relative))) > MAX_RELATIVE_BYTES:
        digest = hashlib.sha256(os.fsencode(guest_path)).hexdigest()
        relative = PurePosixPath("_overlong", digest)
    return relative


def _safe_component(name: str, *, first: bool) -> str:
    if first and len(name) == 2 and name[1] == ":" and name[0].isalpha():
        name = name[0]  # "C:" -> "C": a Windows drive becomes a directory
    encoded = os.fsencode(name)
    if len(encoded) > MAX_COMPONENT_BYTES:
        digest = hashlib.sha256(encoded).hexdigest()[:16]
        # A cut multibyte sequence decodes to surrogates and encodes back to the same bytes.
        name = os.fsdecode(encoded[:200]) + "~" + digest
    return name


def contained_path(dest: Path, relative: PurePosixPath) -> Path:
    """``dest/relative`` after creating its parents, refusing any symlink on the way.

    ``dest`` must already be resolved.

    :raise UnsafeGuestPath: a symlink or a non-directory is in the way, or the
        result would leave ``dest``.
    """
    current = dest
    for part in relative.parts[:-1]:
        current = current / part
        if current.is_symlink():
            raise UnsafeGuestPath(f"{current} is a symlink; refusing to write through it")
        if current.exists() and not current.is_dir():
            raise UnsafeGuestPath(f"{current} exists and is not a directory")
        current.mkdir(exist_ok=True)
    target = current / relative.parts[-1]
    if target.is_symlink():
        raise UnsafeGuestPath(f"{target} is a symlink; refusing to replace it")
    if not target.resolve().is_relative_to(dest):
        raise UnsafeGuestPath(f"{target} resolves outside {dest}")
    return target


def _unique(relative: PurePosixPath, used: set[PurePosixPath]) -> PurePosixPath:
    """Two guest paths may normalise to one host path; later ones get ``~N``."""
    candidate, number = relative, 1
    while candidate in used:
        number += 1
        candidate = relative.with_name(f"{relative.name}~{number}")
    used.add(candidate)
    return candidate


def _hash_pulled(path: Path, root: Path, max_bytes: int) -> tuple[int, str]:
    """Size and sha256 of a pulled file, checked to be a plain file under root, not too big."""
    if path.is_symlink() or not path.resolve().is_relative_to(root):
        raise UnsafeGuestPath(f"{path} is no longer a plain file under {root}")
    if path.stat().st_size > max_bytes:  # e.g. sparse, from a chunk index far out
        raise UnsafeGuestPath(f"{path}: {path.stat().st_size} bytes > {max_bytes}")
    digest, size = hashlib.sha256(), 0
    with path.open("rb") as stream:
        while block := stream.read(1024 * 1024):
            digest.update(block)
            size += len(block)
    return size, digest.hexdigest()


class _SizeCap:
    """A pull progress callback that aborts once more than ``limit`` bytes arrived."""

    def __init__(self, guest_path: str, limit: int) -> None:
        self.guest_path, self.limit = guest_path, limit

    def __call__(self, done: int, _total: int) -> None:
        if done > self.limit:
            raise UnsafeGuestPath(
                f"{self.guest_path!r}: more than {self.limit} bytes arrived; pull stopped"
            )


async def pull_changed(
    guest: PullingGuest,
    diff: FsDiff,
    dest: Path,
    *,
    include_timestamps_only: bool = True,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> list[Path]:
    """Copy the created and modified regular files of ``diff`` to ``dest/<guest path>``.

    Files that cannot be pulled (vanished, unsafe path, hash mismatch, too big)
    are recorded as ``failed``/``skipped`` in the manifest instead of stopping
    the collection. Returns the host paths of the files pulled.
    """
    root = await asyncio.to_thread(_make_root, dest)
    used: set[PurePosixPath] = set()
    skip = set() if include_timestamps_only else set(diff.timestamps_only)
    records: list[EvidenceRecord] = []
    pulled: list[Path] = []
    for change, guest_path in _candidates(diff):
        entry = diff.after_entries.get(guest_path)
        record = EvidenceRecord(guest_path, "skipped", change)
        if entry is not None:
            record.guest_size, record.guest_sha256 = entry.size, entry.sha256
        if entry is None or entry.kind != "file":
            record.reason = f"not a regular file ({entry.kind if entry else 'no metadata'})"
        elif guest_path in skip:
            record.reason = "only timestamps changed"
        else:
            await _pull_one(guest, record, root, used, max_bytes)
            if record.status == "pulled" and record.host_path is not None:
                pulled.append(root / record.host_path)
        records.append(record)
    await asyncio.to_thread(_write_manifest, root / MANIFEST_NAME, diff, records)
    return pulled


def _make_root(dest: Path) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    return dest.resolve()


def _candidates(diff: FsDiff) -> list[tuple[str, str]]:
    return sorted(
        [("created", p) for p in diff.created] + [("modified", p) for p in diff.modified],
        key=lambda item: item[1],
    )


async def _pull_one(
    guest: PullingGuest,
    record: EvidenceRecord,
    root: Path,
    used: set[PurePosixPath],
    max_bytes: int,
) -> None:
    target: Path | None = None
    try:
        relative = _unique(_off_reserved(relative_evidence_path(record.guest_path)), used)
        target = await asyncio.to_thread(contained_path, root, relative)
        await guest.pull(record.guest_path, target, progress=_SizeCap(record.guest_path, max_bytes))
        size, sha256 = await asyncio.to_thread(_hash_pulled, target, root, max_bytes)
        record.size, record.sha256 = size, sha256
        record.status, record.host_path = "pulled", relative.as_posix()
    except (AdareError, OSError) as exc:
        if target is not None:
            await asyncio.to_thread(_remove_partial, target)
        record.status, record.reason = "failed", str(exc)
        record.size = record.sha256 = None


def _off_reserved(relative: PurePosixPath) -> PurePosixPath:
    """``relative``, moved aside when its first component is the manifest's name."""
    if relative.parts[0] != MANIFEST_NAME:
        return relative
    return PurePosixPath(f"{MANIFEST_NAME}~guest", *relative.parts[1:])


def _remove_partial(target: Path) -> None:
    if not target.is_symlink():
        target.unlink(missing_ok=True)


def _write_manifest(path: Path, diff: FsDiff, records: list[EvidenceRecord]) -> None:
    document: dict[str, Any] = {
        "format": "adare-evidence",
        "version": 1,
        "diff": diff.metadata,
        "files": [asdict(record) for record in records],
    }
    # Created exclusively under a fresh random name: never a file the guest had pulled.
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "w", encoding="ascii") as stream:
            json.dump(document, stream, indent=1)
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise
