"""A Debian 11 (bullseye) root file system: a real Python 3.9 to run the guest agent in.

The agent's floor is Python 3.9 (``PYTHON_FLOOR`` in :mod:`pytest_adare.agent.install`);
``tests/integration/test_python39_guest.py`` proves it by running the agent bundle under
bullseye's ``python3`` (3.9.2) in a ``chroot``. No VM: the chroot shares the host's
kernel and network namespace, so a host client reaches the agent on 127.0.0.1.

Built once with ``mmdebstrap --variant=apt --include=python3`` (needs root and the
Debian mirror) and kept as a directory under
``<pytest-adare cache>/py39-root/<hash of this file>/root`` (``DONE`` beside it holds
the Python version and the build time). Commands run as
``unshare --mount --propagation private`` + a fresh ``/proc`` mounted in that private
mount namespace + ``chroot``: the mount dies with the process, nothing shows on the
host. ``/dev`` holds the device nodes mmdebstrap created (``null``, ``zero``,
``urandom``...), enough for Python and ``subprocess``.

Each user takes its own directory under the root's ``/tmp`` (:func:`scratch_dir`), so
concurrent sessions and xdist workers share one root::

    python tests/py39_root.py            # build (or find) the root; prints its path
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from pytest_adare.cache_dir import cache_root, exclusive_lock

MIRROR = "http://deb.debian.org/debian"
SUITE = "bullseye"
PACKAGES = ("python3",)
_DPKG_EXCLUDES = (
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/doc/*",
    "path-exclude=/usr/share/locale/*",
    "path-exclude=/usr/share/info/*",
)
GUEST_PYTHON = "/usr/bin/python3"
_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}
# In the private mount namespace: a fresh /proc for the chroot, then the command itself.
_ENTER = 'mount -t proc proc "$0/proc" && exec chroot "$0" "$@"'

Log = Callable[[str], None]


def unavailable_reason() -> str | None:
    """Why the root cannot be built or entered here, or None when it can."""
    if os.geteuid() != 0:
        return "needs root (mmdebstrap --mode=root, chroot, a private mount namespace)"
    for tool in ("mmdebstrap", "chroot", "unshare", "mount"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (scripts/setup installs mmdebstrap)"
    return None


def build_key() -> str:
    """Hash of this file: any change here builds the root again."""
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]


def root_dir() -> Path:
    """Where the root of this version of the script lives (``…/<key>/root``)."""
    return cache_root() / "py39-root" / build_key() / "root"


def py39_root(log: Log = print) -> Path:
    """The bullseye root directory, built on first use (≈ 1 min, see ``DONE``)."""
    root = root_dir()
    done = root.parent / "DONE"
    if done.exists():
        return root
    base = root.parent.parent
    base.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(base / ".lock", timeout=1800, what="the Python 3.9 root"):
        if done.exists():
            return root
        for old in base.iterdir():  # roots of other versions of this file, or a failed one
            if old.is_dir():
                shutil.rmtree(old)
        root.parent.mkdir()
        started = time.monotonic()
        log(f"py39 root: mmdebstrap {SUITE} into {root}")
        partial = root.parent / "partial"
        _run(
            [
                "mmdebstrap",
                "--variant=apt",
                "--mode=root",
                "--include=" + ",".join(PACKAGES),
                '--aptopt=Acquire::Retries "3"',
                *(f"--dpkgopt={rule}" for rule in _DPKG_EXCLUDES),
                SUITE,
                str(partial),
                MIRROR,
            ]
        )
        partial.rename(root)
        version = run(root, [GUEST_PYTHON, "-c", "import sys; print(sys.version.split()[0])"])
        elapsed = time.monotonic() - started
        done.write_text(f"python {version.stdout.strip()}\n{elapsed:.0f} s\n")
        log(f"py39 root: python {version.stdout.strip()}, built in {elapsed:.0f} s")
    return root


def _run(argv: Sequence[str]) -> None:
    result = subprocess.run(
        list(argv), stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise RuntimeError(
            f"{' '.join(argv)} failed ({result.returncode}):\n{result.stdout[-3000:]}"
            f"\n{result.stderr[-3000:]}"
        )


def chroot_argv(root: Path, argv: Sequence[str]) -> list[str]:
    """``argv`` run inside ``root``: a private mount namespace, ``/proc`` there, ``chroot``.

    The process that finally runs is ``argv`` itself (``sh`` and ``chroot`` exec it), so
    a signal sent to the returned command's pid reaches it.
    """
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", _ENTER,
            str(root), *argv]  # fmt: skip


def chroot_env() -> dict[str, str]:
    """The environment for a command in the root: a Debian PATH, nothing of the host's."""
    return dict(_ENV)


def run(
    root: Path, argv: Sequence[str], *, timeout: float = 120, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` inside ``root``; text output captured. Raises on failure if ``check``."""
    result = subprocess.run(
        chroot_argv(root, argv),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=chroot_env(),
        timeout=timeout,
        check=False,
    )
    if check and result.returncode != 0:
        raise RuntimeError(
            f"in {root}: {' '.join(argv)} failed ({result.returncode}):\n"
            f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
        )
    return result


@contextmanager
def scratch_dir(root: Path) -> Iterator[tuple[Path, str]]:
    """A fresh directory under the root's ``/tmp``: ``(host path, path inside the root)``.

    Removed on exit.
    """
    host = Path(tempfile.mkdtemp(prefix="adare-py39-", dir=root / "tmp"))
    try:
        yield host, "/" + host.relative_to(root).as_posix()
    finally:
        shutil.rmtree(host, ignore_errors=True)


def main() -> int:
    """Build (or find) the root and print its directory."""
    reason = unavailable_reason()
    if reason is not None:
        print(f"py39_root: {reason}", file=sys.stderr)
        return 2
    print(py39_root())
    return 0


if __name__ == "__main__":
    sys.exit(main())
