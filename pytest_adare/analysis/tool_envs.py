"""One virtual environment per tool version, built once into the cache and reused offline.

``--adare-tool="dissect.target==3.23.1"`` names any pip requirement (several separated
by spaces: ``"dissect.target==3.23.1 dissect.extfs==3.11"``). Its environment lives in
``<cache root>/tools/<name>-<key>``, the key a hash of the requirements and the host's
Python version; it is built under an exclusive lock into a ``.partial`` directory and
renamed into place when pip has finished, so a half-built environment is never used and
a cached one needs no network. Dissect reads ext4 only with ``dissect.extfs`` and the
systemd journal only with zstd (``zstandard`` up to 3.23, ``backports.zstd`` from 3.24;
all in its ``full`` extra), so a requirement on ``dissect.target`` brings them unless
named.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from pytest_adare.analysis.errors import ToolFailed
from pytest_adare.cache_dir import cache_root, exclusive_lock

INSTALL_TIMEOUT = 900.0
COMPANIONS: dict[str, tuple[str, ...]] = {
    "dissect.target": (
        "dissect.extfs", "zstandard", 'backports.zstd; python_version < "3.14"',
    ),
}  # fmt: skip
READY = "requirements.txt"
"""Written last into a finished environment: what pip installed (``pip freeze``)."""

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def _name_of(requirement: str) -> str:
    match = _NAME.match(requirement)
    if match is None:
        raise ValueError(f"{requirement!r} is not a pip requirement (name first)")
    return match.group(0).lower().replace("_", "-").replace(".", "-")


@dataclass(frozen=True)
class ToolSpec:
    """A tool version as given (``text``) and the requirements its environment holds."""

    text: str
    requirements: tuple[str, ...]

    @classmethod
    def parse(cls, text: str) -> ToolSpec:
        """:raise ValueError: empty, or a part that does not start with a package name."""
        given = tuple(text.split())
        if not given:
            raise ValueError("a tool is a pip requirement, e.g. dissect.target==3.23.1; got ''")
        names = [_name_of(r) for r in given]
        extra = [
            companion
            for name in names
            for companion in COMPANIONS.get(name.replace("-", "."), ())
            if _name_of(companion) not in names
        ]
        return cls(text.strip(), given + tuple(extra))

    @property
    def names(self) -> tuple[str, ...]:
        """The distributions named, as pip spells them (``dissect.target``)."""
        return tuple(_NAME.match(r).group(0) for r in self.requirements)  # type: ignore[union-attr]

    @property
    def key(self) -> str:
        python = f"{sys.version_info.major}.{sys.version_info.minor}"
        digest = hashlib.sha256("\n".join([python, *self.requirements]).encode())
        return f"{_name_of(self.requirements[0])}-{digest.hexdigest()[:16]}"


def tools_root() -> Path:
    return cache_root() / "tools"


def tool_python(spec: ToolSpec, root: Path | None = None, timeout: float = INSTALL_TIMEOUT) -> Path:
    """The Python of ``spec``'s environment, built first when it is not cached.

    :raise ToolFailed: pip cannot install it (naming the version and pip's last lines),
        or the lock is held longer than ``timeout`` by another build.
    """
    base = root or tools_root()
    home = base / spec.key
    if (home / READY).is_file():
        return home / "bin" / "python"
    base.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(base / f"{spec.key}.lock", timeout, f"the {spec.text} environment"):
        if not (home / READY).is_file():
            _build(spec, home, timeout)
    return home / "bin" / "python"


def _build(spec: ToolSpec, home: Path, timeout: float) -> None:
    partial = Path(tempfile.mkdtemp(prefix=f".{spec.key}.partial-", dir=home.parent))
    try:
        _run(spec, [sys.executable, "-m", "venv", str(partial)], timeout, "python -m venv")
        python = str(partial / "bin" / "python")
        pip = [python, "-m", "pip", "--disable-pip-version-check", "--no-input"]
        _run(spec, [*pip, "install", "-q", *spec.requirements], timeout, "pip install")
        frozen = _run(spec, [*pip, "freeze"], timeout, "pip freeze")
        (partial / READY).write_text(frozen)
        if home.exists():  # a finished one without its marker: a build killed mid-rename
            shutil.rmtree(home)
        partial.rename(home)
    finally:
        shutil.rmtree(partial, ignore_errors=True)


def _run(spec: ToolSpec, argv: list[str], timeout: float, what: str) -> str:
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired:
        raise ToolFailed(spec.text, f"cannot be installed: {what} ran over {timeout:g} s") from None
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if not line.startswith("WARNING")]
        raise ToolFailed(
            spec.text, f"cannot be installed: {what} exited {done.returncode}",
            "\n".join(lines[-8:]),
        )  # fmt: skip
    return done.stdout


def main(argv: list[str]) -> int:
    """``python -m pytest_adare.analysis.tool_envs REQUIREMENT...``: build (or find) each
    environment, e.g. ahead of a test run (scripts/test does, beside its other builds)."""
    if not argv:
        print("usage: python -m pytest_adare.analysis.tool_envs REQUIREMENT...", file=sys.stderr)
        return 2
    for text in argv:
        try:
            print(f"{text}: {tool_python(ToolSpec.parse(text))}")
        except (ValueError, ToolFailed) as error:
            print(f"tool_envs: {error}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
