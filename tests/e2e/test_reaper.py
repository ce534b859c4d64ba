"""No QEMU outlives the Python process that started it, even when that process is SIGKILLed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

# The child starts QEMU from a short-lived worker thread on purpose: PR_SET_PDEATHSIG
# follows the forking thread, so this fails unless spawn() forks from a long-lived one.
CHILD = """
import subprocess, sys, threading, time
from pytest_adare.machine_tools.reaper import spawn

pids = []
def start():
    proc = spawn(["qemu-system-x86_64", "-machine", "none", "-nodefaults", "-display", "none",
                  "-S"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    pids.append(proc.pid)
worker = threading.Thread(target=start)
worker.start()
worker.join()
time.sleep(0.5)  # the worker thread is gone by now; QEMU must still run
print(pids[0], flush=True)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _wait_gone(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return False


def _sigkill_and_check_qemu_gone(parent: subprocess.Popen[str], not_alive: str) -> None:
    """``parent`` prints its QEMU's pid; SIGKILL it, then that QEMU must go within 10 s."""
    assert parent.stdout is not None
    with parent:  # closes the pipe
        try:
            qemu_pid = int(parent.stdout.readline())
            assert _alive(qemu_pid), not_alive
            os.kill(parent.pid, signal.SIGKILL)
            parent.wait(timeout=10)
            assert _wait_gone(qemu_pid, 10), f"QEMU pid {qemu_pid} outlived its SIGKILLed parent"
        finally:
            parent.kill()
            parent.wait(timeout=10)


def test_qemu_dies_when_the_python_process_that_started_it_is_sigkilled() -> None:
    parent = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True)
    _sigkill_and_check_qemu_gone(parent, "QEMU died with the worker thread that asked for it")


MACHINE_CHILD = """
import sys, tempfile, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from image_under_test import image_under_test
from pytest_adare.machine.spec import MachineSpec
from pytest_adare.qemu.machine import Machine

machine = Machine(image_under_test(), Path(tempfile.mkdtemp()), MachineSpec(accel="tcg")).start()
print(machine.pid, flush=True)
time.sleep(600)
"""


def test_a_started_machine_dies_with_its_sigkilled_python_process() -> None:
    here = str(Path(__file__).parent)
    parent = subprocess.Popen(
        [sys.executable, "-c", MACHINE_CHILD, here], stdout=subprocess.PIPE, text=True
    )
    _sigkill_and_check_qemu_gone(parent, "QEMU is not running")


def test_spawn_refuses_to_replace_its_death_signal_hook() -> None:
    from pytest_adare.machine_tools.reaper import spawn

    with pytest.raises(ValueError, match="preexec_fn"):
        spawn(["true"], preexec_fn=lambda: None)
