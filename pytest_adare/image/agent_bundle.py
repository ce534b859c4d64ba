"""The agent bundle: one zipapp file that runs the guest agent on a stock ``python3``.

``python3 bundle.pyz RUN_DIR [--serial DEV] ...`` runs :func:`adare_guest.cli.main`.
The zip holds ``adare_guest``, ``frame_codec`` and the pure-Python parts of
``serial`` (pyserial), copied from the host's installed packages; with ``gui=True``
also ``pyautogui`` and its pure-Python dependencies (the guest brings
``python3-xlib`` and ``python3-pil`` itself). No compiled extension goes in. The
agent's WebSocket server is its own (:mod:`adare_guest.websocket.server`, standard
library only), so the bundle does not carry ``websockets``, whose releases need a
newer Python than the oldest guests have.

Each module also goes in as a ``.pyc`` compiled with the unchecked-hash
invalidation mode (no timestamps), so a guest Python of the host's minor
version imports without compiling. The zip is deterministic (fixed timestamps,
sorted entries) and cached by content under
``$XDG_CACHE_HOME/pytest-adare/bundles/``.

The member ``BUNDLE_ID`` is a sha256 over every other member (name, size, bytes):
the agent reports it as its ``bundle_hash`` (see :mod:`adare_guest.identity`), so
a change anywhere in the bundle, third-party code included, gives a new identity.

The guest Python uses the ``.pyc`` members only when its magic number equals the
host's (same minor version: 3.11 host and Debian 12 guest); otherwise zipimport
compiles the ``.py`` members at every start.

Example::

    bundle = build_agent_bundle()
    subprocess.run(["python3", str(bundle.path), "/tmp/run"])
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import io
import os
import py_compile
import tempfile
import warnings
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from adare_guest import __version__
from adare_guest.identity import BUNDLE_ID_MEMBER
from pytest_adare.cache_dir import cache_root

AGENT_PACKAGES = ("adare_guest", "frame_codec", "serial")
GUI_PACKAGES = (
    "pyautogui",
    "pymsgbox",
    "pytweening",
    "pyscreeze",
    "pygetwindow",
    "mouseinfo",
    "pyrect",
    "pyperclip",
)
# Parts of the dependencies the agent never imports. Leaving them out keeps the bundle
# small, which matters: a guest reads a bundle handed over by fw_cfg in O(size^2).
EXCLUDED = {
    "serial": (
        "tools/",
        "urlhandler/",
        "threaded/",
        "__main__.py",
        "rfc2217.py",
        "rs485.py",
        "serialjava.py",
        "serialcli.py",
    ),
}
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)
_MAIN = b"import sys\nfrom adare_guest.cli import main\n\nsys.exit(main())\n"


@dataclass(frozen=True)
class AgentBundle:
    """A built bundle: where it is and who it is (``bundle_hash``: its ``BUNDLE_ID``)."""

    path: Path
    sha256: str
    bundle_hash: str
    version: str


def _package_dir(name: str) -> Path:
    # The installed files, whatever sys.modules holds (a test may have replaced a module);
    # packages installed in editable mode are found by their own finder.
    spec = importlib.machinery.PathFinder.find_spec(name) or importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        hint = (
            " (an agent that drives a desktop needs the gui extra: "
            "pip install 'pytest-adare[gui]')"
            if name in GUI_PACKAGES
            else ""
        )
        raise ModuleNotFoundError(f"package {name!r} is not installed on the host{hint}")
    return Path(next(iter(spec.submodule_search_locations)))


def _package_files(name: str) -> list[tuple[str, Path]]:
    """``(archive name, file)`` for every ``.py`` (and typed marker) of an installed package."""
    root = _package_dir(name)
    found: list[tuple[str, Path]] = []
    for path in root.rglob("*"):
        if "__pycache__" in path.parts or not path.is_file():
            continue
        relative = path.relative_to(root).as_posix()
        if relative.startswith(EXCLUDED.get(name, ())):
            continue
        if path.suffix == ".py" or path.name == "py.typed":
            found.append((f"{name}/{relative}", path))
    return sorted(found)


def _compile(source: bytes, archive_name: str) -> bytes:
    # Third-party code has invalid escapes ("\\e" in pyautogui): not our warning to show.
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", SyntaxWarning)
        target = Path(tmp) / "out.pyc"
        (Path(tmp) / "source.py").write_bytes(source)
        py_compile.compile(
            str(Path(tmp) / "source.py"),
            cfile=str(target),
            dfile=archive_name,
            doraise=True,
            invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
        )
        return target.read_bytes()


def _entry(name: str, data: bytes) -> tuple[zipfile.ZipInfo, bytes]:
    info = zipfile.ZipInfo(name, date_time=_ZIP_TIME)
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = 0o644 << 16
    return info, data


def _members(gui: bool) -> dict[str, bytes]:
    packages = AGENT_PACKAGES + (GUI_PACKAGES if gui else ())
    members = {"__main__.py": _MAIN}
    for package in packages:
        for name, path in _package_files(package):
            data = path.read_bytes()
            members[name] = data
            if name.endswith(".py"):
                members[name + "c"] = _compile(data, name)
    return members


def bundle_id(members: Mapping[str, bytes]) -> str:
    """sha256 (hex) over the name, size and bytes of every member but ``BUNDLE_ID``."""
    digest = hashlib.sha256()
    for name in sorted(members):
        if name == BUNDLE_ID_MEMBER:
            continue
        data = members[name]
        digest.update(f"{name}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()


def _zip(members: Mapping[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    buffer.write(b"#!/usr/bin/env python3\n")
    with zipfile.ZipFile(buffer, "w") as archive:
        for name in sorted(members):
            info, data = _entry(name, members[name])
            archive.writestr(info, data, compresslevel=6)
    return buffer.getvalue()


def bundle_bytes(gui: bool = False) -> bytes:
    """The bundle's bytes (deterministic for the same installed packages)."""
    return _bundle(gui)[0]


_built: dict[bool, tuple[tuple[tuple[str, int, int], ...], bytes, str]] = {}
"""This process's last bundle per flavour, with the signature of the sources it was
made from: compiling and zipping them is ~0.4 s of every VM start under load, a
``stat`` of each ~2 ms."""


def _sources_signature(gui: bool) -> tuple[tuple[str, int, int], ...]:
    """Each source file's path, mtime and size: a file edited in place changes it."""
    packages = AGENT_PACKAGES + (GUI_PACKAGES if gui else ())
    signature = []
    for package in packages:
        for _, path in _package_files(package):
            stat = path.stat()
            signature.append((str(path), stat.st_mtime_ns, stat.st_size))
    return tuple(signature)


def _bundle(gui: bool) -> tuple[bytes, str]:
    signature = _sources_signature(gui)
    cached = _built.get(gui)
    if cached is not None and cached[0] == signature:
        return cached[1], cached[2]
    members = _members(gui)
    identity = bundle_id(members)
    members[BUNDLE_ID_MEMBER] = f"{identity}\n".encode()
    data = _zip(members)
    _built[gui] = (signature, data, identity)
    return data, identity


def build_agent_bundle(gui: bool = False) -> AgentBundle:
    """Build (or reuse from the cache) the agent bundle for the installed agent code.

    :raise ModuleNotFoundError: a package the bundle needs is not installed.
    """
    data, identity = _bundle(gui)
    digest = hashlib.sha256(data).hexdigest()
    directory = cache_root() / "bundles"
    directory.mkdir(parents=True, exist_ok=True)
    flavour = "gui" if gui else "console"
    path = directory / f"adare-agent-{__version__}-{flavour}-{digest[:16]}.pyz"
    if not path.exists() or hashlib.sha256(path.read_bytes()).hexdigest() != digest:
        fd, tmp = tempfile.mkstemp(dir=directory, suffix=".part")
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    return AgentBundle(path=path, sha256=digest, bundle_hash=identity, version=__version__)
