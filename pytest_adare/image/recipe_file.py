"""A user's image recipe (TOML): a base image and the steps that extend it (a leaf).

::

    base = "debian-desktop"            # a built-in name (debian-desktop:trixie: its suite),
                                       # a manifest, a disk, or another recipe
    name = "fm-desktop"
    install = ["pcmanfm", "mousepad"]  # distribution packages
    provision = ["update-mime-database /usr/share/mime"]   # shell, as root, in order
    [[files]]
    source = "data/report.pdf"         # inside the recipe's directory
    dest = "/home/user/Documents/report.pdf"
    owner = "user"
    mode = "0644"                      # default: the source's permission bits

One recipe may extend several Debian suites: ``base = ["debian:bullseye",
"debian:bookworm"]`` (built-in names only) makes one image per suite, each cached by its
own hash. ``recipe.toml@bullseye`` names one of them; ``--adare-vm=recipe.toml`` runs the
matrix over all (:func:`recipe_variants`), with ids ``recipe-bullseye``,
``recipe-bookworm``.

The steps run in this order: packages, files, provision commands, then ``systemctl
enable`` of the units ``services = ["web.service"]`` names (a systemd base only; systemd
starts them at every boot). Everything a build depends on is read here, up front, so
bad input fails before anything is built: an unknown key, a missing copied file or base,
a package or unit name that is not one.

What a recipe may reach on the host is decided here too: a copied file lies inside the
recipe's directory (after symlinks; never an absolute path or ``..``), and a
destination is a plain absolute guest path (no ``..``, ``.`` or empty component), which
the build resolves inside the image's root only. A recipe is at most
:data:`MAX_RECIPE_BYTES` of UTF-8, and an error quotes at most :data:`SHOWN_CHARS` of a
bad value.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import stat
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from pytest_adare.errors import ImageError
from pytest_adare.file_hash import stream_sha256
from pytest_adare.image.manifest import BUILTIN_IMAGES
from pytest_adare.image.suites import DEFAULT_SUITE, split_suite

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

RECIPE_SUFFIX = ".toml"
VARIANT_MARK = "@"
"""``recipe.toml@bullseye``: the recipe on one of its bases' suites."""
MAX_BASES = 16
MAX_RECIPE_BYTES = 1 << 20
"""A recipe is a short text; a bigger file is refused before it is parsed."""
SHOWN_CHARS = 80
"""How much of a bad value an error quotes."""
MAX_GUEST_PATH = 4096
RECIPE_KEYS = ("base", "name", "install", "provision", "files", "services")
MAX_SERVICES = 64
FILE_KEYS = ("source", "dest", "owner", "mode")
# Debian, RPM and pacman package names (and apt's name=version, name/suite): never a
# shell word that does something else, since the names reach the guest's shell.
_PACKAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9+._:~=/-]*")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
# A unit systemctl can enable (systemd.unit(5): name[@instance][.type]; a bare name is a
# .service to systemctl), never an option or a path: the names reach the guest's shell and
# systemctl's argument list.
_UNIT = re.compile(
    r"[A-Za-z0-9:_][A-Za-z0-9:_.\\-]*(@[A-Za-z0-9:_.\\-]*)?"
    r"\.(service|socket|timer|path|target|mount|automount|swap)"
    r"|[A-Za-z0-9:_][A-Za-z0-9:_\\-]*(@[A-Za-z0-9:_\\-]*)?"  # bare: no dot to misread
)
_OWNER = re.compile(r"[a-z_][a-z0-9_-]*(:[a-z_][a-z0-9_-]*)?|[0-9]+(:[0-9]+)?")


@dataclass(frozen=True)
class FileCopy:
    """One host file copied into the image: ``source`` (absolute, no symlink in it) →
    ``dest``, with ``mode`` (the recipe's, else the source's permission bits)."""

    source: Path
    dest: str
    owner: str | None
    mode: int
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
    services: tuple[str, ...] = ()
    """systemd units ``systemctl enable`` turns on once the other steps ran."""

    @property
    def builtin_base(self) -> str | None:
        """The built-in image this recipe extends directly (``debian``, ``debian:trixie``), if
        any."""
        return self.base if _builtin(self.base) else None

    def steps(self) -> dict[str, Any]:
        """The steps as plain data: what the manifest records and the hash covers."""
        steps: dict[str, Any] = {
            "install": list(self.install),
            "provision": list(self.provision),
            "files": [copy.hashed() for copy in self.files],
        }
        if self.services:  # absent when empty: the hashes of recipes without any stay
            steps["services"] = list(self.services)
        return steps

    def image_hash(self, base_identity: str) -> str:
        """A short sha256 of the base's identity (disk sha256 or recipe hash) and every step."""
        text = json.dumps({"base": base_identity, **self.steps()}, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def _builtin(base: str) -> bool:
    return base in BUILTIN_IMAGES or split_suite(base) is not None


def split_variant(spec: str | Path) -> tuple[str, str | None]:
    """``(recipe path, suite)`` of ``recipe.toml@suite``; ``(spec, None)`` for anything else.

    >>> split_variant("r/web.toml@bullseye"), split_variant("a@b/web.toml")
    (('r/web.toml', 'bullseye'), ('a@b/web.toml', None))
    """
    text = str(spec)
    head, mark, variant = text.rpartition(VARIANT_MARK)
    if mark and head.endswith(RECIPE_SUFFIX) and "/" not in variant and variant:
        return head, variant
    return text, None


def is_recipe(spec: str | Path) -> bool:
    """True when ``spec`` names a recipe file (by its ``.toml`` suffix), perhaps with a
    suite (``recipe.toml@bullseye``)."""
    return split_variant(spec)[0].endswith(RECIPE_SUFFIX)


def _suite_of(base: str) -> str:
    named = split_suite(base)
    return named[1] if named is not None else DEFAULT_SUITE


def recipe_variants(spec: str | Path) -> tuple[str, ...]:
    """The specs of a recipe's suites (``web.toml@bullseye``, ``web.toml@bookworm``) when
    its ``base`` is a list, else ``()``: one image, or a spec that names one already.

    A recipe that cannot be read gives ``()`` too: building it reports why, as for any
    image.
    """
    path, variant = split_variant(spec)
    if variant is not None or not path.endswith(RECIPE_SUFFIX):
        return ()
    try:
        source = Path(path).expanduser().resolve()
        bases = _bases(tomllib.loads(_recipe_text(source)), source)
    except (ImageError, tomllib.TOMLDecodeError, RecursionError, OSError):
        return ()
    if bases is None:
        return ()
    return tuple(f"{path}{VARIANT_MARK}{_suite_of(base)}" for base in bases)


def _fail(source: Path, problem: str) -> ImageError:
    return ImageError(f"recipe {source}: {problem}")


def shown(value: object) -> str:
    """``repr(value)``, cut to :data:`SHOWN_CHARS` characters (a bad value may be huge).

    >>> shown("x" * 10**6)[-24:]
    'xx… (1000002 characters)'
    """
    text = repr(value)
    if len(text) <= SHOWN_CHARS:
        return text
    return f"{text[:SHOWN_CHARS]}… ({len(text)} characters)"


def _strings(data: Mapping[str, Any], key: str, source: Path) -> tuple[str, ...]:
    value = data.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise _fail(source, f"'{key}' must be a list of non-empty strings, got {shown(value)}")
    return tuple(value)


def check_packages(packages: Sequence[str], source: Path | str) -> tuple[str, ...]:
    """:raise ImageError: a name that is not a package name (names it)."""
    for package in packages:
        if not _PACKAGE.fullmatch(package):
            raise ImageError(f"recipe {source}: {shown(package)} is not a package name")
    return tuple(packages)


def check_services(units: Sequence[str], source: Path | str) -> tuple[str, ...]:
    """:raise ImageError: more than :data:`MAX_SERVICES`, or a name that is not a
    systemd unit's (names it)."""
    if len(units) > MAX_SERVICES:
        raise ImageError(f"recipe {source}: 'services' lists at most {MAX_SERVICES} units")
    for unit in units:
        if not _UNIT.fullmatch(unit):
            raise ImageError(
                f"recipe {source}: {shown(unit)} is not a systemd unit name "
                "(NAME, NAME.service, NAME.timer, NAME.socket, ...)"
            )
    return tuple(dict.fromkeys(units))


def enable_command(units: Sequence[str]) -> str:
    """The shell command that enables ``units`` (their names checked already): offline
    (``--root=/``: the links of each unit's ``[Install]`` section, no systemd needed to
    answer), the same in a build root and in a booted base.

    >>> enable_command(["nginx.service", "backup.timer"])
    'systemctl --root=/ enable -- nginx.service backup.timer'
    """
    return shlex.join(["systemctl", "--root=/", "enable", "--", *units])


def _bases(data: Mapping[str, Any], source: Path) -> tuple[str, ...] | None:
    """The built-in bases of a ``base`` list (their suites all different), or None when
    ``base`` is no list."""
    bases = data.get("base")
    if not isinstance(bases, list):
        return None
    if not bases or len(bases) > MAX_BASES:
        raise _fail(source, f"'base' lists 1 to {MAX_BASES} built-in images, got {shown(bases)}")
    suites: dict[str, str] = {}
    for base in bases:
        try:
            builtin = isinstance(base, str) and _builtin(base)
        except ImageError as exc:
            raise _fail(source, f"'base': {exc}") from None
        if not builtin:
            raise _fail(
                source, f"'base' lists built-in images with their suites (debian:bullseye, "
                f"debian-desktop:bookworm), got {shown(base)}",
            )  # fmt: skip
        suite = _suite_of(base)
        if suite in suites:
            raise _fail(source, f"'base' lists suite {suite!r} twice ({suites[suite]}, {base})")
        suites[suite] = base
    return tuple(bases)


def _chosen_base(data: Mapping[str, Any], source: Path, variant: str | None) -> str:
    """The one base of the recipe: its ``base`` string, or the list's entry for ``variant``."""
    bases = _bases(data, source)
    if bases is None:
        if variant is not None:
            raise _fail(
                source, f"@{variant}: the recipe has one base ({shown(data.get('base'))}); "
                "'@SUITE' chooses among a list of bases",
            )  # fmt: skip
        return _base(data, source)
    suites = {_suite_of(base): base for base in bases}
    if variant is None:
        if len(bases) == 1:
            return bases[0]
        raise _fail(
            source, f"its bases are {', '.join(bases)}: choose one with "
            f"{source.name}{VARIANT_MARK}{next(iter(suites))}, or give the recipe to "
            "--adare-vm, which runs the tests on each",
        )  # fmt: skip
    if variant not in suites:
        raise _fail(
            source, f"@{variant}: no base of that suite (its bases: {', '.join(bases)})"
        )
    return suites[variant]


def _base(data: Mapping[str, Any], source: Path) -> str:
    base = data.get("base")
    if not isinstance(base, str) or not base:
        raise _fail(source, "'base' is missing (a built-in name, a manifest, a disk or a recipe)")
    below, variant = split_variant(base)
    if variant is not None:  # another recipe, on one of its suites
        return f"{_base({'base': below}, source)}{VARIANT_MARK}{variant}"
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
    raise _fail(source, f'{where}.mode must be an octal string like "0644", got {shown(raw)}')


def open_source(path: Path) -> BinaryIO:
    """``path`` open for reading: never through a symlink in its last component, never
    blocking on a FIFO, and only if it is a regular file.

    :raise ImageError: it cannot be opened or is not a regular file (says which).
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise ImageError(f"cannot read {path}: {exc.strerror}") from None
    kind = os.fstat(fd).st_mode
    if not stat.S_ISREG(kind):
        os.close(fd)
        raise ImageError(f"{path} is {_kind(kind)}, not a regular file")
    return os.fdopen(fd, "rb")


def _kind(mode: int) -> str:
    kinds = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"))
    return next((name for test, name in kinds if test(mode)), "a device")


def _guest_path(raw: Any, where: str, source: Path) -> str:
    """A destination: absolute, each component a plain name (the build never lets it
    climb out of the image's root; refusing ``..`` says so at once)."""
    if not isinstance(raw, str) or not raw.startswith("/"):
        raise _fail(source, f"{where}.dest must be an absolute guest path, got {shown(raw)}")
    parts = raw.split("/")[1:]
    bad = next((p for p in parts if p in ("", ".", "..")), None)
    if bad is not None or len(raw) > MAX_GUEST_PATH or not raw.isprintable():
        why = f"a {bad!r} component" if bad is not None else "too long or a control character"
        raise _fail(source, f"{where}.dest {shown(raw)} is not a plain absolute path ({why})")
    return raw


def _host_source(raw: Any, where: str, source: Path) -> Path:
    """The copied file: a relative path that stays inside the recipe's directory, symlinks
    resolved (a recipe never picks up a host file from elsewhere)."""
    if not isinstance(raw, str) or not raw:
        raise _fail(source, f"{where}.source is missing")
    if raw.startswith(("/", "~")) or ".." in raw.split("/") or "\0" in raw:
        raise _fail(
            source,
            f"{where}.source {shown(raw)} must be a path inside the recipe's directory "
            "(relative, without '..')",
        )
    home = source.parent
    host = Path(os.path.realpath(home / raw))
    if not host.is_relative_to(home):
        raise _fail(
            source,
            f"{where}.source {shown(raw)} leads to {host}, outside the recipe's directory "
            f"{home} (a symlink); copy the file in instead",
        )
    return host


def _file_copies(data: Mapping[str, Any], source: Path) -> tuple[FileCopy, ...]:
    raw = data.get("files", [])
    if not isinstance(raw, list):
        raise _fail(source, f"'files' must be a list of tables ([[files]]), got {shown(raw)}")
    copies = []
    for index, entry in enumerate(raw):
        where = f"files[{index}]"
        if not isinstance(entry, dict):
            raise _fail(source, f"{where} must be a table, got {shown(entry)}")
        _refuse_unknown(entry, FILE_KEYS, source, f"{where}: ")
        host = _host_source(entry.get("source"), where, source)
        dest = _guest_path(entry.get("dest"), where, source)
        owner = entry.get("owner")
        if owner is not None and not (isinstance(owner, str) and _OWNER.fullmatch(owner)):
            raise _fail(source, f"{where}.owner must be a user (or user:group), got {shown(owner)}")
        mode = _mode(entry.get("mode"), where, source)
        try:
            with open_source(host) as stream:
                own_mode = os.fstat(stream.fileno()).st_mode & 0o777
                digest = stream_sha256(stream)
        except ImageError as exc:
            raise _fail(
                source, f"{where}.source names {host}, which is not a file ({exc})"
            ) from None
        copies.append(FileCopy(host, dest, owner, own_mode if mode is None else mode, digest))
    return tuple(copies)


def _refuse_unknown(
    data: Mapping[str, Any], known: tuple[str, ...], source: Path, where: str = ""
) -> None:
    for key in data:
        if key not in known:
            raise _fail(source, f"{where}unknown key {shown(key)} (known: {', '.join(known)})")


def _recipe_text(source: Path) -> str:
    try:
        with open_source(source) as stream:
            data = stream.read(MAX_RECIPE_BYTES + 1)
    except ImageError as exc:
        raise ImageError(f"cannot read recipe {exc}") from None
    except OSError as exc:
        raise ImageError(f"cannot read recipe {source}: {exc.strerror}") from None
    if len(data) > MAX_RECIPE_BYTES:
        raise _fail(source, f"larger than {MAX_RECIPE_BYTES >> 20} MiB; a recipe is a short text")
    try:
        return data.decode()
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise _fail(
            source, f"not UTF-8 text (byte 0x{data[exc.start]:02x} on line {line})"
        ) from None


def load_recipe(path: str | Path) -> ImageRecipe:
    """Read and check a recipe file.

    :raise ImageError: unreadable, not a regular file, too big, not UTF-8 TOML, an
        unknown key, a wrong value, or a base or copied file that does not exist or may
        not be used (the message names the key or file and the recipe's path).
    """
    path, variant = split_variant(path)
    source = Path(path).expanduser().resolve()
    text = _recipe_text(source)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise _fail(source, f"not valid TOML ({exc})") from exc
    except RecursionError:
        raise _fail(source, "nested too deeply to be a recipe") from None
    _refuse_unknown(data, RECIPE_KEYS, source)
    name = data.get("name", source.stem)
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise _fail(source, f"'name' must be letters, digits, '.', '_' or '-', got {shown(name)}")
    base = _chosen_base(data, source, variant)
    if variant is not None:
        name = f"{name}-{variant}"  # one cached image per suite, told apart by name too
    return ImageRecipe(
        name=name,
        base=base,
        install=check_packages(_strings(data, "install", source), source),
        provision=_strings(data, "provision", source),
        files=_file_copies(data, source),
        path=source,
        services=check_services(_strings(data, "services", source), source),
    )
