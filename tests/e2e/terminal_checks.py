"""Driving ``adare-vm`` as a user does: a program on a pty, and the terminal checks.

:class:`PtyProcess` runs a command with a pseudo-terminal as its terminal (what a
person's terminal emulator gives it); :func:`adare_vm` runs ``adare-vm`` scripted (no
tty). :func:`check_terminal` is the terminal's contract on a registered VM, as one
guest user: ``adare-vm shell NAME [--user U] -- id -un`` says who ran it, an
interactive ``adare-vm shell`` echoes a typed command's output, and Ctrl-C interrupts
a ``sleep`` in the guest while the shell stays. ``test_gui_desktop.py`` runs it on the
desktop image and ``test_own_images.py`` (in its inner pytest runs) on distro disks.
"""

from __future__ import annotations

import contextlib
import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pytest_adare.vm import VM

ADARE_VM = [sys.executable, "-m", "pytest_adare.interactive.cli"]
WAIT = 60.0
REPO = Path(__file__).resolve().parents[2]


class PtyProcess:
    """A program with a pty as its terminal; its output collected as it is read."""

    def __init__(
        self, argv: list[str], cwd: Path | None = None, env: dict[str, str] | None = None
    ) -> None:
        self.pid, self.fd = pty.fork()
        if self.pid == 0:
            if cwd is not None:
                os.chdir(cwd)
            os.execvpe(argv[0], argv, os.environ if env is None else env)
        self.output = b""
        self.returncode: int | None = None

    def expect(self, pattern: bytes, timeout: float = WAIT) -> re.Match[bytes]:
        deadline = time.monotonic() + timeout
        while (found := re.search(pattern, self.output)) is None:
            remaining = deadline - time.monotonic()
            ready, _, _ = select.select([self.fd], [], [], max(0.0, remaining))
            if not ready:
                raise AssertionError(f"no {pattern!r} in {timeout} s: {self.output[-2000:]!r}")
            try:
                self.output += os.read(self.fd, 65536)
            except OSError:
                raise AssertionError(f"ended before {pattern!r}: {self.output[-2000:]!r}") from None
        return found

    def type(self, data: bytes) -> None:
        os.write(self.fd, data)

    def wait(self, timeout: float = WAIT) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with_output = select.select([self.fd], [], [], 0.2)[0]
            if with_output:
                try:
                    self.output += os.read(self.fd, 65536)
                except OSError:
                    pass
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                os.close(self.fd)
                self.returncode = os.waitstatus_to_exitcode(status)
                return self.returncode
        self.kill()
        raise AssertionError(f"still running after {timeout} s: {self.output[-2000:]!r}")

    def kill(self) -> None:
        """SIGKILL it if it still runs (a test that failed leaves nothing behind)."""
        if self.returncode is not None:  # reaped: the pid may be someone else's now
            return
        with contextlib.suppress(ProcessLookupError, ChildProcessError):
            os.kill(self.pid, signal.SIGKILL)
            _, status = os.waitpid(self.pid, 0)
            self.returncode = os.waitstatus_to_exitcode(status)
            os.close(self.fd)


def adare_vm(*args: str) -> subprocess.CompletedProcess[str]:
    """``adare-vm ARGS`` without a terminal (scripted use); its status and output."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return subprocess.run([*ADARE_VM, *args], capture_output=True, text=True, timeout=WAIT, env=env)


@contextlib.contextmanager
def registered(vm: VM, image: str) -> Iterator[str]:
    """``vm`` registered as ``adare-vm run`` registers its VM; the name to enter it by."""
    from pytest_adare.interactive.reach import register

    registration = register(
        vm, base="vm", image=image, owner=f"test (pid {os.getpid()})", on_stop=lambda: None
    )
    try:
        yield registration.name
    finally:
        registration.close()


def check_terminal(name: str, user: str | None, expected_user: str) -> None:
    """The terminal works in VM ``name`` as ``user`` (None: the default, root).

    Scripted: ``-- id -un`` prints ``expected_user`` and exits 0, a status comes back.
    Interactive, on a pty: a typed command runs as that user, Ctrl-C interrupts a
    ``sleep`` in the guest (not ``adare-vm``) and the shell goes on, ``exit`` ends it.
    """
    as_user = ["--user", user] if user is not None else []
    who = adare_vm("shell", name, *as_user, "--", "id", "-un")
    assert (who.returncode, who.stdout) == (0, f"{expected_user}\n"), who
    status = adare_vm("shell", name, *as_user, "--", "sh", "-c", "exit 7")
    assert status.returncode == 7, status

    shell = PtyProcess([*ADARE_VM, "shell", name, *as_user])
    try:
        shell.expect(rb"[#$] ")
        shell.type(b"echo who-$(id -un)-$((40+2))\n")
        shell.expect(re.escape(f"who-{expected_user}-42\r\n".encode()))
        shell.type(b"echo go-$((1)); sleep 60; echo sl$((1))ept\n")
        shell.expect(rb"go-1\r\n")
        time.sleep(0.5)  # the shell has started the sleep
        started = time.monotonic()
        shell.type(b"\x03")
        shell.type(b"echo back-$((1+1))\n")
        shell.expect(rb"back-2\r\n", 20)
        assert time.monotonic() - started < 20 and b"sl1ept" not in shell.output
        shell.type(b"exit\n")
        assert shell.wait() == 0, shell.output[-2000:]
    finally:
        shell.kill()
