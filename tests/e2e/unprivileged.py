"""An ordinary user for the rootless tests (CI runs as root), and code that user can run.

The venv's Python may live where that user cannot enter (``/root``), so the user runs
the system Python over a readable copy: this checkout's packages and the installed
distributions the plugin needs at run time, with a ``pytest_adare`` dist-info whose
entry point loads the plugin as ``pip install`` would.
"""

from __future__ import annotations

import importlib.metadata
import os
import pwd
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[2]
RUNTIME_DISTRIBUTIONS = (
    "pytest",
    "pytest-asyncio",
    "websockets",
    "qemu.qmp",
    "pyserial",
    "pillow",
    "pycdlib",
)
OPTIONAL_DISTRIBUTIONS = ("libvirt-python",)  # for --adare-hypervisor=qemu:///session
OUR_PACKAGES = ("pytest_adare", "adare_guest", "frame_codec")


@dataclass(frozen=True)
class OrdinaryUser:
    """A user without root (nor the kvm group), its home, and the Python it runs."""

    name: str
    uid: int
    gid: int
    home: Path
    site: Path

    def env(self, cache: Path) -> dict[str, str]:
        return {
            "HOME": str(self.home),
            "USER": self.name,
            "LOGNAME": self.name,
            "PATH": "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin",
            "PYTHONPATH": str(self.site),
            "XDG_CACHE_HOME": str(cache),
            "LANG": "C.UTF-8",
        }

    def run(
        self,
        argv: list[str],
        *,
        cache: Path,
        cwd: Path,
        timeout: float,
        env: dict[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """``argv`` (``python`` is the system Python) as this user, output captured."""
        python = shutil.which("python3", path="/usr/bin:/bin") or sys.executable
        argv = [python if arg == "python" else arg for arg in argv]
        drop = ["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--init-groups", "--"]
        return subprocess.run(
            [*drop, *argv],
            cwd=cwd,
            env={**self.env(cache), **(env or {})},
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            stdin=subprocess.DEVNULL,
        )


def ensure_user(name: str) -> pwd.struct_passwd:
    """``name``, made with a home and subordinate ids if it does not exist yet."""
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        subprocess.run(["useradd", "--create-home", "--shell", "/bin/sh", name], check=True)
        entry = pwd.getpwnam(name)
    for path, flag in (
        (Path("/etc/subuid"), "--add-subuids"),
        (Path("/etc/subgid"), "--add-subgids"),
    ):
        listed = path.exists() and any(
            line.split(":", 1)[0] == name for line in path.read_text().splitlines()
        )
        if not listed:  # useradd adds them on Debian; not every useradd does
            start = 200000 + 65536 * (entry.pw_uid % 1000)
            subprocess.run(["usermod", flag, f"{start}-{start + 65535}", name], check=True)
    return entry


def _requirements(dist: importlib.metadata.Distribution) -> list[str]:
    names = []
    for text in dist.requires or ():
        requirement = Requirement(text)
        if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
            names.append(requirement.name)
    return names


def readable_site(target: Path) -> Path:
    """Copy our packages and the run-time distributions (with their own requirements)
    into ``target``, world-readable; returns ``target``."""
    target.mkdir(parents=True, exist_ok=True)
    for package in OUR_PACKAGES:
        ignore = shutil.ignore_patterns("__pycache__")
        shutil.copytree(REPO / package, target / package, ignore=ignore, dirs_exist_ok=True)
    info = target / "pytest_adare-0.1.0.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: pytest-adare\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text("[pytest11]\nadare = pytest_adare.plugin\n")
    todo, done = list(RUNTIME_DISTRIBUTIONS), set()
    for name in OPTIONAL_DISTRIBUTIONS:
        try:
            importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        todo.append(name)
    while todo:
        dist = importlib.metadata.distribution(todo.pop())
        key = dist.metadata["Name"].lower()
        if key in done:
            continue
        done.add(key)
        todo.extend(_requirements(dist))
        for file in dist.files or ():
            source = Path(str(dist.locate_file(file)))
            if "__pycache__" in file.parts or not source.is_file() or ".." in file.parts:
                continue
            (target / file).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target / file)
    for dirpath, _dirs, files in os.walk(target):
        os.chmod(dirpath, 0o755)
        for name in files:
            os.chmod(Path(dirpath, name), 0o644)
    return target


def ordinary_user(name: str, base: Path) -> OrdinaryUser:
    """The user ``name`` (made if needed) and a readable copy of the code under ``base``."""
    entry = ensure_user(name)
    base.mkdir(parents=True, exist_ok=True)
    base.chmod(0o755)
    return OrdinaryUser(
        name, entry.pw_uid, entry.pw_gid, Path(entry.pw_dir), readable_site(base / "site")
    )
