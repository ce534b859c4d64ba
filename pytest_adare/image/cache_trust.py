"""Whether an image in the cache may be booted: who made it and what its manifest names.

Anyone who may write a shared image cache (``ADARE_IMAGE_CACHE``) can put a directory
in it under the name of an image not built yet, and write a manifest whose disk is a
file of yours. So an entry is booted only when its directory, its manifest and every
file the manifest names are

- owned by a trusted owner: you, root, the owner of the cache directory, or a user
  named in ``ADARE_IMAGE_CACHE_TRUST`` (names or uids, separated by commas or spaces);
- regular files (the entry a directory), reached through no symlink, that neither
  group nor others may write;
- inside the entry. Only an image layered over a base outside the cache (a recipe over
  your own disk) may name its base's kernel and initrd where they are; those pass the
  same owner and mode checks.

A shared cache that group or others may write must be sticky (``chmod +t``), or a
member could rename or swap another's entries between these checks and the boot.
The disk's content is checked by :mod:`pytest_adare.image.disk_check`.
"""

from __future__ import annotations

import os
import pwd
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from pytest_adare.errors import ImageError, printable
from pytest_adare.image.manifest import ImageManifest

TRUST_ENV = "ADARE_IMAGE_CACHE_TRUST"
"""More owners whose images this user boots from a shared cache (names or uids)."""
MAX_MANIFEST_BYTES = 1 << 20
"""A manifest is a few hundred bytes; a larger file is not one of ours (never parsed)."""


@dataclass(frozen=True)
class TrustRule:
    """The owners whose cache entries this user boots, and why each is trusted."""

    owners: dict[int, str]

    def check_owner(self, path: Path, uid: int, entry: Path) -> None:
        """:raise ImageError: ``uid`` (the owner of ``path``) is not trusted."""
        if uid in self.owners:
            return
        trusted = "; ".join(f"{_user_name(u)} ({why})" for u, why in self.owners.items())
        name = _user_name(uid)
        raise ImageError(
            f"the cached image {entry.name} is not booted: {printable(str(path))} belongs to "
            f"{name} (uid {uid}), who is not trusted (trusted: {trusted}); remove {entry} "
            f"if you did not expect it, or add {name} to {TRUST_ENV} to boot their images"
        )


def trust_rule(root: Path) -> TrustRule:
    """Who is trusted in the image cache ``root`` (see the module docstring).

    :raise ImageError: ``ADARE_IMAGE_CACHE_TRUST`` names a user that does not exist.
    """
    owners = {os.geteuid(): "you", 0: "root"}
    try:
        owners.setdefault(os.stat(root).st_uid, f"owner of {root}")
    except FileNotFoundError:
        pass
    for word in re.split(r"[\s,]+", os.environ.get(TRUST_ENV, "").strip()):
        if word:
            owners.setdefault(_uid_of(word), TRUST_ENV)
    return TrustRule(owners)


def _uid_of(word: str) -> int:
    if word.isdigit():
        return int(word)
    try:
        return pwd.getpwnam(word).pw_uid
    except KeyError:
        raise ImageError(f"{TRUST_ENV} names {word!r}, which is no user here") from None


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def check_shared_root(root: Path) -> None:
    """:raise ImageError: others may write ``root`` and it is not sticky."""
    mode = os.stat(root).st_mode
    if mode & 0o022 and not mode & stat.S_ISVTX:
        raise ImageError(
            f"the shared image cache {root} may be written by its group or others but is "
            f"not sticky, so any of them could rename or replace another's images: run "
            f"chmod +t {root}"
        )


def check_entry(manifest_path: Path, rule: TrustRule) -> None:
    """Check the entry directory and its manifest before the manifest is read.

    :raise ImageError: what did not pass, naming the path and the owner.
    """
    entry = manifest_path.parent
    check_path(entry, rule, entry, directory=True)
    info = check_path(manifest_path, rule, entry)
    if info.st_size > MAX_MANIFEST_BYTES:
        raise ImageError(
            f"the cached image {entry.name}: its manifest {manifest_path} is "
            f"{info.st_size} bytes, larger than any manifest ({MAX_MANIFEST_BYTES})"
        )


def check_files(manifest: ImageManifest, entry: Path, rule: TrustRule) -> None:
    """Check every file ``manifest`` (loaded from ``entry``) names.

    :raise ImageError: a file outside the entry (but a layered image's base kernel and
        initrd), or one that does not pass :func:`check_path`.
    """
    real_entry = entry.resolve()
    for field, path in (("disk", manifest.disk), ("kernel", manifest.kernel),
                        ("initrd", manifest.initrd)):  # fmt: skip
        if path is None:
            continue
        outside = path.parent != real_entry
        if outside and not (field != "disk" and manifest.base_sha256 is not None):
            raise ImageError(
                f"the cached image {entry.name} is not booted: its manifest's '{field}' "
                f"names {printable(str(path))}, outside the image's directory {real_entry} "
                "(a cached image's files are its own)"
            )
        check_path(path, rule, entry)


def check_path(
    path: Path, rule: TrustRule, entry: Path, *, directory: bool = False
) -> os.stat_result:
    """``path``'s ``lstat``, once it passed the owner, type and mode checks.

    :raise ImageError: a symlink, the wrong kind, writable by group or others, or an
        owner ``rule`` does not trust.
    """
    try:
        info = os.lstat(path)
    except OSError as exc:
        raise ImageError(
            f"the cached image {entry.name}: cannot read {printable(str(path))}: {exc.strerror}"
        ) from exc
    want, kind = (stat.S_ISDIR, "a directory") if directory else (stat.S_ISREG, "a file")
    if not want(info.st_mode):
        found = "a symbolic link" if stat.S_ISLNK(info.st_mode) else "something else"
        raise ImageError(
            f"the cached image {entry.name} is not booted: {printable(str(path))} is "
            f"{found}, not {kind}"
        )
    rule.check_owner(path, info.st_uid, entry)
    if info.st_mode & 0o022:
        raise ImageError(
            f"the cached image {entry.name} is not booted: {printable(str(path))} may be "
            f"written by its group or others (mode {stat.S_IMODE(info.st_mode):04o})"
        )
    return info
