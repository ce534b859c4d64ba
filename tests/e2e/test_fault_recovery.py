"""A VM that dies mid-test is replaced for the next test; only the dying test errors.

One inner pytest run, one session VM, two faults in sequence (3 boots in all): test 2
panics the guest kernel, test 5 SIGKILLs QEMU in the middle of a call. Each errors
with the console tail; the tests after each run on a freshly started VM.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

INNER_TIMEOUT = 900

FAULTS = """
import os
import threading
from pathlib import Path

PIDS = []

def qemu_pid(guest, adare_vm):
    # A replaced VM is a new QEMU process. (Its boot id can be the same: a warm start
    # resumes the saved boot.)
    with Path("qemu-pids.txt").open("a") as pids:
        pids.write(f"{adare_vm.machine.pid}\\n")
    assert guest.shell("echo alive").check().stdout == "alive\\n"
    return adare_vm.machine.pid

def test_1_works(guest, adare_vm):
    PIDS.append(qemu_pid(guest, adare_vm))

def test_2_guest_kernel_panics(guest):
    guest.shell("echo c > /proc/sysrq-trigger", timeout=20)

def test_3_runs_on_a_replaced_vm(guest, adare_vm):
    PIDS.append(qemu_pid(guest, adare_vm))
    assert PIDS[0] != PIDS[1]

def test_4_the_replaced_vm_keeps_its_isolation(guest):
    guest.shell("echo x > /root/left-behind").check()
    assert guest.shell("cat /root/left-behind").stdout == "x\\n"

def test_5_qemu_killed_mid_call(guest, adare_vm):
    threading.Timer(3.0, os.kill, (adare_vm.machine.pid, 9)).start()
    guest.shell("sleep 120", timeout=150)

def test_6_runs_on_a_replaced_vm(guest, adare_vm):
    PIDS.append(qemu_pid(guest, adare_vm))
    assert PIDS[2] != PIDS[1]
    assert guest.shell("ls /root/left-behind 2>/dev/null").stdout == ""
"""


def test_a_dead_vm_is_replaced_and_only_the_test_that_killed_it_errors(
    pytester: pytest.Pytester, test_image: str
) -> None:
    pytester.makepyfile(test_faults=FAULTS)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-v", f"--adare-vm={test_image}", timeout=INNER_TIMEOUT
    )
    output = "\n".join(result.outlines + result.errlines)
    result.assert_outcomes(passed=4, errors=2)
    result.stdout.fnmatch_lines(
        [
            "*test_2_guest_kernel_panics ERROR*",
            "*vm0 died (*): starting it again*",
            "*test_3_runs_on_a_replaced_vm PASSED*",
            "*test_4_the_replaced_vm_keeps_its_isolation PASSED*",
            "*test_5_qemu_killed_mid_call ERROR*",
            "*vm0 died (QEMU exited with code -9): starting it again*",
            "*test_6_runs_on_a_replaced_vm PASSED*",
        ]
    )
    result.stdout.fnmatch_lines(
        ["*ERROR at call of test_2_guest_kernel_panics*", "*adare console tail*", "*Kernel panic*"]
    )
    result.stdout.fnmatch_lines(["*ERROR at call of test_5_qemu_killed_mid_call*"])
    assert "is broken since an earlier failure" not in output
    assert "qemu.qmp" not in output and "StateError" not in output
    assert "websockets.exceptions" not in output
    pids = {int(line) for line in (pytester.path / "qemu-pids.txt").read_text().split()}
    assert len(pids) == 3
    assert not any(Path(f"/proc/{pid}").exists() for pid in pids), "a QEMU outlived pytest"
