"""``userns_enter.py`` as root: it maps the ids itself (root has no ``/etc/subuid`` lines
for ``newuidmap`` to read), and with ``--die-with-parent`` the program ends with the
process that started it, though the change to namespace root cleared any earlier
parent-death signal."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from pytest_adare.image.userns import NamespaceRoot

REPO = Path(__file__).resolve().parents[4]

# Inner root is nobody outside; what a writable share's virtiofsd runs with.
AS_NOBODY = NamespaceRoot("0 65534 1", "0 65534 1")

# The process that wraps the program is the one that starts it (the wrap names it).
STARTER = """
import subprocess, sys, time
from pytest_adare.image.userns import NamespaceRoot
wrap = NamespaceRoot("0 65534 1", "0 65534 1").wrap
proc = subprocess.Popen(wrap(["sleep", "30"], die_with_parent=sys.argv[1] == "die"))
print(proc.pid, flush=True)
time.sleep(60)
"""


def test_root_maps_the_ids_itself() -> None:
    done = subprocess.run(
        AS_NOBODY.wrap(["sh", "-c", "id -u; cat /proc/self/uid_map"]),
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    first, mapping = done.stdout.split("\n", 1)
    assert first == "0" and mapping.split() == ["0", "65534", "1"]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_the_program_ends_with_its_starter_only_when_asked() -> None:
    for die_with_parent in (True, False):
        with subprocess.Popen(
            [sys.executable, "-c", STARTER, "die" if die_with_parent else "live"],
            stdout=subprocess.PIPE, text=True, cwd=REPO,
        ) as starter:  # fmt: skip
            assert starter.stdout is not None
            pid = int(starter.stdout.readline())
            deadline = time.monotonic() + 10
            # argv[0] is sleep once the entry has made its namespace and exec'd it.
            while not Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"sleep\0"):
                assert time.monotonic() < deadline, "the program never started"
                time.sleep(0.02)
            starter.kill()
        deadline = time.monotonic() + 5
        while _alive(pid) and die_with_parent and time.monotonic() < deadline:
            time.sleep(0.02)
        try:
            assert _alive(pid) is not die_with_parent
        finally:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
