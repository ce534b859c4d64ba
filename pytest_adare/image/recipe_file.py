"""A user's image recipe (TOML): a base image and the steps that extend it (a leaf).

::

    base = "debian-desktop"            # a built-in name (debian-desktop:trixie: its suite),
                                       # a manifest, a disk, or another recipe
    name = "fm-desktop"
    install = ["pcmanfm", "mousepad"]  # distribution packages
    provision = ["update-mime-database /usr/share/mime"]   # shell, as root, in order
    [[files]]
    source = "data/report.pdf"         # relative to the recipe
    dest = "/home/user/Documents/report.pdf"
    owner = "user"
    mode = "0644"

The steps run in this order: packages, files, provision commands. Everything a build
depends on is read here, up front, so bad input fails before anything is built:
an unknown key, a missing copied file or base, a package name that is not one.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_adare.errors import ImageError
from pytest_adare.image.manifest import BUILTIN_IMAGES
from pytest_adare.image.suites import split_suite

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

RECIPE_SUFFIX = ".toml"
RECIPE_KEYS = ("base", "name", "install", "provision", "files")
FILE_KEYS = ("source", "dest", "owner", "mode")
# Debian, RPM and pacman package names (and apt's name=version, name/suite): never a
# shell word that does something else, since the names reach the guest's shell.
_PACKAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9+._:~=/-]*")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_OWNER = re.compile(r"[a-z_][a-z0-9_-]*(:[a-z_][a-z0-9_-]*)?|[0-9]+(:[0-9]+)?")


@dataclass(frozen=True)
class FileCopy:
    """One host file copied into the image: ``source`` (absolute) → ``dest``."""

    source: Path
    dest: str
    owner: str | None
    mode: int | None
    sha256: str

    def hashed(self) -> dict[str, Any]:
        """What of the copy changes the image: its content and where it lands, not the
        host path (two projects with the same file share the image)."""
        return {"dest": self.dest, "owner": self.owner, "mode": self.mode, "sha256": self.sha256}


@dataclass(frozen=True)
class ImageRecipe:
    """A parsed recipe. ``base`` is a built-in name (perhaps with a suite: ``debian:trixie``)
    or an absolute path."""

    name: str
    base: str
    install: tuple[str, ...] = ()
    provision: tuple[str, ...] = ()
    files: tuple[FileCopy, ...] = ()
    path: Path | None = field(default=None, compare=False)
    """The recipe file (None for the one-line ``adare-image build`` form)."""

    @property
    def builtin_base(self) -> str | None:
        """The built-in image this recipe extends directly (``debian``, ``debian:trixie``), if
        any."""
        return self.base if _builtin(self.base) else None

    def steps(self) -> dict[str, Any]:
        """The steps as plain data: what the manifest records and the hash covers."""
        return {
            "install": list(self.install),
            "provision": list(self.provision),
            "files": [copy.hashed() for copy in self.files],
        }

    def image_hash(self, base_identity: str) -> str:
        """A short sha256 of the base's identity (disk sha256 or recipe hash) and every step."""
        text = json.dumps({"base": base_identity, **self.steps()}, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def _builtin(base: str) -> bool:
    return base in BUILTIN_IMAGES or split_suite(base) is not None


def is_recipe(spec: str | Path) -> bool:
    """True when ``spec`` names a recipe file (by its ``.toml`` suffix)."""
    return str(spec).endswith(RECIPE_SUFFIX)


def _fail(source: Path, problem: str) -> ImageError:
    return ImageError(f"recipe {source}: {problem}")


def _strings(data: Mapping[str, Any], key: str, source: Path) -> tuple[str, ...]:
    value = data.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise _fail(source, f"'{key}' must be a list of non-empty strings, got {value!r}")
    return tuple(value)


def check_packages(packages: Sequence[str], source: Path | str) -> tuple[str, ...]:
    """:raise ImageError: a name that is not a package name (names it)."""
    for package in packages:
        if not _PACKAGE.fullmatch(package):
            raise ImageError(f"recipe {source}: {package!r} is not a package name")
    return tuple(packages)


def _base(data: Mapping[str, Any], source: Path) -> str:
    base = data.get("base")
    if not isinstance(base, str) or not base:
        raise _fail(source, "'base' is missing (a built-in name, a manifest, a disk or a recipe)")
    path = (source.parent / base).expanduser().resolve()
    try:
        if _builtin(base) and not path.exists():
            return base
    except ImageError as exc:
        raise _fail(source, f"'base': {exc}") from None
    if not path.exists():
        raise _fail(source, f"'base' names {path}, which does not exist")
    if path == source:
        raise _fail(source, "'base' names the recipe itself")
    return str(path)


def _mode(raw: Any, where: str, source: Path) -> int | None:
    if raw is None:
        return None
    if isinstance(raw, str) and re.fullmatch(r"0?[0-7]{3,4}", raw):
        return int(raw, 8)
    raise _fail(source, f"{where}.mode must be an octal string like \"0644\", got {raw!r}")


def _file_copies(data: Mapping[str, Any], source: Path) -> tuple[FileCopy, ...]:
    raw = data.get("files", [])
    if not isinstance(raw, list):
        raise _fail(source, f"'files' must be a list of tables ([[files]]), got {raw!r}")
    copies = []
    for index, entry in enumerate(raw):
        where = f"files[{index}]"
        if not isinstance(entry, dict):
            raise _fail(source, f"{where} must be a table, got {entry!r}")
        _refuse_unknown(entry, FILE_KEYS, source, f"{where}: ")
        src, dest, owner = entry.get("source"), entry.get("dest"), entry.get("owner")
        if not isinstance(src, str) or not src:
            raise _fail(source, f"{where}.source is missing")
        if not isinstance(dest, str) or not dest.startswith("/"):
            raise _fail(source, f"{where}.dest must be an absolute guest path, got {dest!r}")
        if owner is not None and not (isinstance(owner, str) and _OWNER.fullmatch(owner)):
            raise _fail(source, f"{where}.owner must be a user (or user:group), got {owner!r}")
        host = (source.parent / src).expanduser().resolve()
        if not host.is_file():
            raise _fail(source, f"{where}.source names {host}, which is not a file")
        digest = hashlib.sha256(host.read_bytes()).hexdigest()
        copies.append(FileCopy(host, dest, owner, _mode(entry.get("mode"), where, source), digest))
    return tuple(copies)


def _refuse_unknown(
    data: Mapping[str, Any], known: tuple[str, ...], source: Path, where: str = ""
) -> None:
    for key in data:
        if key not in known:
            raise _fail(source, f"{where}unknown key {key!r} (known: {', '.join(known)})")


def load_recipe(path: str | Path) -> ImageRecipe:
    """Read and check a recipe file.

    :raise ImageError: unreadable, not TOML, an unknown key, a wrong value, or a base
        or copied file that does not exist (the message names the key or file and the
        recipe's path).
    """
    source = Path(path).expanduser().resolve()
    try:
        data = tomllib.loads(source.read_text())
    except OSError as exc:
        raise ImageError(f"cannot read recipe {source}: {exc.strerror}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise _fail(source, f"not valid TOML ({exc})") from exc
    _refuse_unknown(data, RECIPE_KEYS, source)
    name = data.get("name", source.stem)
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise _fail(source, f"'name' must be letters, digits, '.', '_' or '-', got {name!r}")
    return ImageRecipe(
        name=name,
        base=_base(data, source),
        install=check_packages(_strings(data, "install", source), source),
        provision=_strings(data, "provision", source),
        files=_file_copies(data, source),
        path=source,
    )
