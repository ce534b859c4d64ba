"""Stepping inside, driven for real through pseudo-terminals (issues 26, 34).

``adare-vm run`` on the built-in image: a typed command's output, Ctrl-C interrupting a
``sleep`` in the guest while the shell stays, ``adare-vm list`` and ``adare-vm shell
NAME -- CMD`` from a second terminal (one argument is a shell command line, run with the
interactive shell's ``PATH``), a second local user who can neither list nor enter, exit,
no QEMU left. A pytest run with ``--adare-pause-on-fail`` whose test fails:
``adare-vm shell NAME -- cat FILE`` reads what the test wrote, Enter lets pytest finish
with ``1 failed``, and the failure film ends at the failure (what one did while paused
is not in it, nor is a frame per cursor blink); ``guest.breakpoint()`` pauses a passing
test the same way. A kept VM is listed, entered and stopped, beside a second run's
``vm0`` (each name carries its run; ``stop vm0`` is refused naming both), and so is a
failing test's VM that ``--adare-keep=on-failure`` handed to a keeper, after pytest
exited. The boots after the first are warm starts (~2 s).
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from image_under_test import image_under_test
from PIL import Image
from terminal_checks import ADARE_VM, WAIT, PtyProcess, adare_vm

from pytest_adare.interactive import registry
from pytest_adare.machine_tools.screen_recorder import STILL_BOX

pytestmark = pytest.mark.e2e

BOOT_WAIT = 300.0


def qemu_children_of(pid: int) -> list[int]:
    found = subprocess.run(["pgrep", "-P", str(pid), "qemu"], capture_output=True, text=True)
    return [int(p) for p in found.stdout.split()]


@pytest.fixture(scope="module")
def image() -> str:
    manifest = image_under_test()
    return str(manifest.path or manifest.disk)


@pytest.fixture(scope="module")
def other_user() -> Iterator[str | None]:
    """A second local user made for the test (root only), removed afterwards."""
    if os.geteuid() != 0 or shutil.which("useradd") is None or shutil.which("runuser") is None:
        yield None
        return
    name = f"adare-other-{os.getpid() % 100000}"
    subprocess.run(["useradd", "--no-create-home", name], check=True)
    try:
        yield name
    finally:
        subprocess.run(["userdel", name], check=False)


def test_adare_vm_run_a_shell_ctrl_c_and_no_qemu_left(image: str, other_user: str | None) -> None:
    run = PtyProcess([*ADARE_VM, "run", image])
    name = run.expect(rb"adare-vm shell (\S+)", BOOT_WAIT).group(1).decode()
    assert name == f"vm0@{run.pid}"  # this run's first VM
    run.expect(rb"# ", WAIT)
    run.type(b"echo sum-$((40+2)) > /root/typed; cat /root/typed\n")
    run.expect(rb"sum-42\r\n")
    run.type(b'echo "P=$PATH."\n')
    interactive_path = run.expect(rb"P=(\S+)\.\r\n").group(1).decode()
    assert "/adare/bin" in interactive_path.split(":")
    # Ctrl-C reaches the guest's sleep, not adare-vm; the shell stays.
    run.type(b"sleep 60; echo sl$((1))ept\n")
    time.sleep(1.0)
    started = time.monotonic()
    run.type(b"\x03")
    run.type(b"echo back-$((1+1))\n")
    run.expect(rb"back-2\r\n", 20)
    assert time.monotonic() - started < 20 and b"sl1ept" not in run.output

    listing = adare_vm("list")
    assert name in listing.stdout and "adare-vm run" in listing.stdout
    scripted = adare_vm("shell", name, "--", "cat", "/root/typed")
    assert (scripted.returncode, scripted.stdout) == (0, "sum-42\n")
    assert adare_vm("shell", name, "--", "sh", "-c", "exit 7").returncode == 7
    # One argument is a command line (it was one program's name: exit 127), and a
    # command gets the interactive shell's PATH (busybox's ps was "not found").
    line = adare_vm("shell", name, "--", 'echo "P=$PATH"; cd /root && tr a-z A-Z < typed; ps')
    assert line.returncode == 0, line
    assert line.stdout.startswith(f"P={interactive_path}\nSUM-42\n"), line.stdout
    assert "PID" in line.stdout.splitlines()[2]
    if other_user is not None:  # the registry and the owner's socket are the user's alone
        directory = registry.registry_dir()
        assert directory.stat().st_mode & 0o777 == 0o700
        assert (directory / f"{name}.sock").stat().st_mode & 0o777 == 0o600
        assert (directory / f"{name}.json").stat().st_mode & 0o777 == 0o600
        probe = (
            "import os, socket, sys\n"
            "try:\n    print(os.listdir(sys.argv[1]))\n"
            "except PermissionError:\n    print('list: denied')\n"
            "s = socket.socket(socket.AF_UNIX)\n"
            "try:\n    s.connect(sys.argv[2]); print('entered')\n"
            "except PermissionError:\n    print('enter: denied')\n"
        )
        theirs = subprocess.run(
            ["runuser", "-u", other_user, "--", "/usr/bin/python3", "-c", probe,
             str(directory), str(directory / f"{name}.sock")],
            capture_output=True, text=True, timeout=WAIT,
        )  # fmt: skip
        assert theirs.stdout.split("\n")[:2] == ["list: denied", "enter: denied"], theirs

    run.type(b"exit\n")
    assert run.wait() == 0
    assert not qemu_children_of(run.pid)
    assert name not in adare_vm("list").stdout


FAILING_TEST = """
import time


def test_writes_then_fails(guest):
    guest.shell("echo left-by-the-test > /root/evidence")
    # On the screen (the VGA console), still but for the blinking cursor, for a while.
    guest.shell("printf '\\\\033c%s\\\\n' THE-SCREEN-AT-THE-FAILURE > /dev/tty1")
    time.sleep(3)
    assert False, "look inside"
"""
EXPLORE = "{ printf '\\033c'; for i in $(seq 20); do echo EXPLORING-$i; done; } > /dev/tty1"


def pytest_env() -> dict[str, str]:
    """This environment without ``CI``: pausing is refused in CI."""
    return {k: v for k, v in os.environ.items() if k != "CI"}


def film_frames(film: Path) -> list[np.ndarray]:
    with Image.open(film) as animation:
        frames = []
        for index in range(getattr(animation, "n_frames", 1)):
            animation.seek(index)
            frames.append(np.asarray(animation.convert("RGB"), dtype=np.int16))
    return frames


def changed(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Where two screens differ by more than a lossy film's noise (a bool mask)."""
    return np.asarray(np.abs(a - b).max(axis=2) > 64)


def test_pause_on_fail_lets_one_step_in_then_enter_finishes(image: str, tmp_path: Path) -> None:
    (tmp_path / "test_fails.py").write_text(FAILING_TEST)
    artifacts = tmp_path / "artifacts"
    run = PtyProcess(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "test_fails.py",
         f"--adare-vm={image}", "--adare-pause-on-fail", f"--adare-artifacts={artifacts}", "-q"],
        cwd=tmp_path, env=pytest_env(),
    )  # fmt: skip
    name = run.expect(rb"adare-vm shell (test_writes_then_fails-vm\d+@\d+)", BOOT_WAIT).group(1)
    assert name.endswith(b"@%d" % run.pid)  # the run is the pytest run
    read = adare_vm("shell", name.decode(), "--", "cat", "/root/evidence")
    assert (read.returncode, read.stdout) == (0, "left-by-the-test\n")
    # Exploring changes the screen; the film was still recording it, for as long as the
    # pause lasted (the sleep gives a 2 fps recorder frames to take).
    assert adare_vm("screen", name.decode(), str(tmp_path / "failure.png")).returncode == 0
    explored = adare_vm("shell", name.decode(), "--", EXPLORE)
    assert explored.returncode == 0, explored
    assert adare_vm("screen", name.decode(), str(tmp_path / "explored.png")).returncode == 0
    time.sleep(3)
    run.type(b"\n")
    run.expect(rb"1 failed", WAIT)
    assert run.wait() == 1
    assert not qemu_children_of(run.pid)

    [film] = artifacts.glob("*test_writes_then_fails*/recording.webp")
    frames = film_frames(film)
    at_failure = np.asarray(Image.open(tmp_path / "failure.png").convert("RGB"), dtype=np.int16)
    explored_screen = np.asarray(
        Image.open(tmp_path / "explored.png").convert("RGB"), dtype=np.int16
    )
    assert changed(at_failure, explored_screen).mean() > 0.01  # exploring showed
    assert changed(frames[-1], at_failure).mean() < 0.002, "the film ends at the failure"
    for frame in frames:
        assert changed(frame, explored_screen).mean() > 0.005, "exploring is not in the film"
    for before, after in itertools.pairwise(frames):  # no frame per cursor blink
        rows, cols = np.nonzero(changed(before, after))
        assert rows.size, "two film frames in a row are distinct"
        box = (cols.max() - cols.min() + 1, rows.max() - rows.min() + 1)
        assert box[0] > STILL_BOX[0] or box[1] > STILL_BOX[1], box


def test_a_kept_vm_is_listed_entered_and_stopped(image: str) -> None:
    run = PtyProcess([*ADARE_VM, "run", image, "--keep", "--idle-stop", "5"])
    name = run.expect(rb"adare-vm shell (\S+)", BOOT_WAIT).group(1).decode()
    run.expect(rb"# ", WAIT)
    run.type(b"exit\n")
    run.expect(rb"keeps running", WAIT)
    assert run.wait() == 0
    listing = adare_vm("list")
    assert name in listing.stdout and "keeper" in listing.stdout
    entered = adare_vm("shell", name, "--", "echo", "inside")
    assert (entered.returncode, entered.stdout) == (0, "inside\n")

    # A second run has its own vm0 (it got vm1: a stale "stop vm0" stopped the other's).
    second = PtyProcess([*ADARE_VM, "run", image])
    try:
        other = second.expect(rb"adare-vm shell (\S+)", BOOT_WAIT).group(1).decode()
        assert (registry.short_name(name), other) == ("vm0", f"vm0@{second.pid}")
        listing = adare_vm("list")
        assert listing.stdout.split()[:3] == ["NAME", "IMAGE", "RUN"]
        rows = {line.split()[0]: line.split()[2] for line in listing.stdout.splitlines()[1:]}
        assert (rows[name], rows[other]) == (name.partition("@")[2], str(second.pid))
        refused = adare_vm("stop", "vm0")
        assert refused.returncode == 2 and "give the whole name" in refused.stderr
        assert name in refused.stderr and other in refused.stderr, refused.stderr
        assert {name, other} <= set(adare_vm("list").stdout.split())  # both still run
        second.expect(rb"# ", WAIT)
        second.type(b"exit\n")
        assert second.wait() == 0
    finally:
        second.kill()
    assert adare_vm("stop", name).returncode == 0
    deadline = time.monotonic() + WAIT
    while name in adare_vm("list").stdout and time.monotonic() < deadline:
        time.sleep(0.5)
    assert name not in adare_vm("list").stdout


BREAKPOINT_TEST = """
def test_pauses_here(guest):
    guest.shell("echo before-the-breakpoint > /root/bp")
    guest.breakpoint()
    assert guest.shell("cat /root/bp").stdout == "before-the-breakpoint\\n"
"""


def test_guest_breakpoint_pauses_the_test_and_enter_goes_on(image: str, tmp_path: Path) -> None:
    (tmp_path / "test_bp.py").write_text(BREAKPOINT_TEST)
    run = PtyProcess(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "test_bp.py",
         f"--adare-vm={image}", "-q"],
        cwd=tmp_path, env=pytest_env(),
    )  # fmt: skip
    name = run.expect(rb"adare-vm shell (test_pauses_here-vm\d+@\d+)", BOOT_WAIT).group(1).decode()
    run.expect(rb"guest.breakpoint\(\)")
    read = adare_vm("shell", name, "--", "cat", "/root/bp")
    assert (read.returncode, read.stdout) == (0, "before-the-breakpoint\n")
    run.type(b"\n")
    run.expect(rb"1 passed", WAIT)
    assert run.wait() == 0
    assert name not in adare_vm("list").stdout


def keeper_pid(owner: str) -> int:
    found = re.search(r"keeper pid (\d+)", owner)
    assert found, owner
    return int(found.group(1))


def test_keep_on_failure_leaves_the_failing_state_running_after_pytest(
    image: str, tmp_path: Path
) -> None:
    (tmp_path / "test_fails.py").write_text(FAILING_TEST)
    pytest_run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "test_fails.py",
         f"--adare-vm={image}", "--adare-keep=on-failure", "--adare-keep-idle=10", "-q"],
        cwd=tmp_path, capture_output=True, text=True, timeout=BOOT_WAIT + WAIT,
    )  # fmt: skip
    assert pytest_run.returncode == 1, pytest_run.stdout[-3000:]
    found = re.search(r"kept running: .* adare-vm shell (\S+) .*10 min unused", pytest_run.stdout)
    assert found, pytest_run.stdout[-3000:]
    name = found.group(1)
    assert "boot it again" not in pytest_run.stdout  # the VM runs: no QEMU line to retype
    entry = registry.find(name)  # pytest has exited; the keeper holds it
    keeper = keeper_pid(entry.owner)
    assert name in adare_vm("list").stdout
    read = adare_vm("shell", name, "--", "cat", "/root/evidence")
    assert (read.returncode, read.stdout) == (0, "left-by-the-test\n")
    qemu = qemu_children_of(keeper)
    assert len(qemu) == 1
    assert adare_vm("stop", name).returncode == 0
    deadline = time.monotonic() + WAIT
    while registry.owner_alive(keeper) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not registry.owner_alive(keeper), "the keeper ended"
    assert not registry.owner_alive(qemu[0]), "and its QEMU with it"
    assert name not in adare_vm("list").stdout
