"""The plugin end to end: inner pytest runs that boot real QEMU guests.

Each inner run is one pytest session, so the VM boots once per run; the scenarios
are grouped to keep boots few (a TCG boot takes ~10+ s here).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from pytest_adare.interactive.cli import main as adare_vm_main
from pytest_adare.machine_tools.run_dir import make_run_dir
from tests.inner_run import run_inner_pytest

pytestmark = pytest.mark.e2e

INNER_TIMEOUT = 600
HAVE_PYTEST_HTML = importlib.util.find_spec("pytest_html") is not None

ONE_SESSION = """
import pytest

def test_1_writes_files(guest):
    guest.shell("echo x > /root/left-behind && echo y > /dev/shm/left-behind").check()

def test_2_snapshot_restored_them_away(guest):
    assert guest.shell("ls /root/left-behind /dev/shm/left-behind 2>/dev/null").stdout == ""

@pytest.mark.adare_vm(isolation="none")
def test_3_writes_again(guest):
    guest.shell("echo z > /root/kept").check()

@pytest.mark.adare_vm(isolation="none")
def test_4_none_keeps_them(guest):
    assert guest.shell("cat /root/kept").stdout == "z\\n"

def test_5_assertion_fails(guest, adare_artifacts):
    (adare_artifacts / "diff.json").write_text("{}")
    assert guest.shell("echo hi").stdout == "bye\\n"

def test_6_agent_killed_mid_test(guest):
    guest.shell("kill -9 $PPID")

def test_7_next_test_has_a_working_agent(guest):
    assert guest.shell("echo back").stdout == "back\\n"
    assert guest.shell("ls /root/kept 2>/dev/null").stdout == ""

@pytest.mark.adare_vm(gui=True)
def test_8_needs_a_desktop(guest):
    pass
"""


def run_inner(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return run_inner_pytest(pytester, "-p", "no:cacheprovider", *args, timeout=INNER_TIMEOUT)


def test_one_session_isolation_evidence_and_errors(
    pytester: pytest.Pytester, test_image: str, tmp_path: Path
) -> None:
    pytester.makepyfile(test_scenarios=ONE_SESSION)
    artifacts = tmp_path / "evidence"
    junit = tmp_path / "junit.xml"
    html = tmp_path / "report.html"
    html_args = [f"--html={html}", "--self-contained-html"] if HAVE_PYTEST_HTML else []
    result = run_inner(
        pytester,
        "-v",
        "-rs",
        f"--adare-vm={test_image}",
        f"--adare-artifacts={artifacts}",
        "--adare-keep=on-failure",
        f"--junitxml={junit}",
        *html_args,
    )
    result.assert_outcomes(passed=5, failed=1, errors=1, skipped=1)
    result.stdout.fnmatch_lines(
        [
            f"adare: image {test_image}, accel *, isolation snapshot, *gui auto (*), "
            "QEMU emulator version *",
        ]
    )
    result.stdout.fnmatch_lines(
        [
            "*test_2_snapshot_restored_them_away PASSED (restore ready state * s)*",
            "*test_5_assertion_fails FAILED*",
            "*test_6_agent_killed_mid_test ERROR*",
            "*test_7_next_test_has_a_working_agent PASSED (restore ready state * s)*",
        ]
    )
    result.stdout.fnmatch_lines(["*needs a desktop (adare_vm gui=...) but image*has none*"])
    result.stdout.fnmatch_lines(["*ERROR at call of test_6_agent_killed_mid_test*"])
    result.stdout.fnmatch_lines(["*- adare console tail -*", "*adare-init: agent started*"])
    result.stdout.fnmatch_lines(["*- adare agent log tail -*", "*listening on 0.0.0.0:18765*"])
    result.stdout.fnmatch_lines(["*adare screenshot*", "*screendump: *screenshot.png*"])
    evidence = artifacts / "test_scenarios.py_test_5_assertion_fails"
    assert {p.name for p in evidence.iterdir()} >= {
        "console.log",
        "agent.log",
        "screenshot.png",
        "diff.json",
    }
    assert (evidence / "console.log").stat().st_size > 0
    result.stdout.fnmatch_lines(
        [
            "*adare: kept VMs*",
            "kept running: * after *test_5_assertion_fails failed: adare-vm shell *",
            "kept the disk of *",
            "*boot it again: qemu-system-x86_64 * -loadvm adare-ready",
        ]
    )
    # test_5 failed: a keeper runs its VM on; test_6 broke the VM: only its disk is kept.
    running = [line.split("adare-vm shell ")[1].split()[0] for line in result.outlines
               if line.startswith("kept running:")]  # fmt: skip
    assert len(running) == 1
    assert adare_vm_main(["stop", running[0]]) == 0
    kept = [line.rsplit(": ", 1)[1] for line in result.outlines if line.startswith("kept the")]
    assert len(kept) == 1 and Path(kept[0]).is_file()
    shutil.rmtree(Path(kept[0]).parent)
    properties = {(p.get("name"), p.get("value")) for p in ET.parse(junit).iter("property")}
    assert ("adare_screenshot", str(evidence / "screenshot.png")) in properties
    assert ("adare_artifacts", str(evidence)) in properties
    if HAVE_PYTEST_HTML:
        assert "data:image/png;base64," in html.read_text()


def test_reboot_isolation_starts_each_test_on_a_fresh_vm(
    pytester: pytest.Pytester, test_image: str
) -> None:
    pytester.makepyfile(
        """
        def test_1_writes(guest):
            guest.shell("echo x > /root/left-behind").check()

        def test_2_fresh_disk(guest, adare_vm):
            assert guest.shell("ls /root/left-behind 2>/dev/null").stdout == ""
            assert adare_vm.guest.shell("echo same vm").stdout == "same vm\\n"
        """
    )
    result = run_inner(pytester, "-v", f"--adare-vm={test_image}", "--adare-isolation=reboot")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*test_2_fresh_disk PASSED (fresh boot * s)*"])


def test_broken_vm_errors_every_test_at_once_with_the_first_cause(
    pytester: pytest.Pytester,
) -> None:
    disk = pytester.path / "broken.qcow2"
    disk.write_bytes(b"QFI\xfb" + b"\0" * 508)  # a qcow2 magic with a nonsense header
    pytester.makepyfile(
        """
        def test_a(guest):
            pass

        def test_b(guest):
            pass

        def test_c(adare_vm):
            pass
        """
    )
    result = run_inner(pytester, "--adare-vm=broken.qcow2", "--adare-accel=tcg")
    result.assert_outcomes(errors=3)
    assert sum("is broken since an earlier failure" in line for line in result.outlines) >= 2
    assert sum("adare: starting vm0" in line for line in result.outlines) <= 1


def test_xdist_gives_each_worker_its_own_vm(pytester: pytest.Pytester, test_image: str) -> None:
    pytester.makepyfile(
        """
        def test_a(guest):
            guest.shell("echo a > /root/worker").check()

        def test_b(guest):
            guest.shell("echo b > /root/worker").check()
        """
    )
    result = run_inner(pytester, "-n", "2", f"--adare-vm={test_image}")
    result.assert_outcomes(passed=2)


def _qemu_descendants(pid: int) -> set[int]:
    parents: dict[int, int] = {}
    commands: dict[int, bytes] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            commands[int(entry.name)] = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])

    def descends(child: int) -> bool:
        while child in parents and child > 1:
            child = parents[child]
            if child == pid:
                return True
        return False

    return {p for p, cmd in commands.items() if b"qemu-system" in cmd and descends(p)}


def _vm_dirs(qemus: set[int]) -> set[Path]:
    """The per-VM temporary directories named on these QEMUs' command lines."""
    folders = set()
    for pid in qemus:
        for arg in Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0"):
            for part in arg.split(","):
                value = part.split("=", 1)[-1]
                if value.startswith("/tmp/adare-") and value.endswith((".qcow2", ".sock")):
                    folders.add(Path(value).parent)
    return folders


def test_sigkill_of_pytest_leaves_no_qemu(pytester: pytest.Pytester, test_image: str) -> None:
    ready = pytester.path / "vm-is-up"
    pytester.makepyfile(
        """
        import time
        from pathlib import Path

        def test_waits(guest):
            Path(READY).write_text("up")
            time.sleep(300)
        """.replace("READY", repr(str(ready)))
    )
    output = pytester.path / "inner-output.txt"
    with output.open("wb") as sink:
        inner = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pytest",
                "-p",
                "no:cacheprovider",
                "-q",
                f"--adare-vm={test_image}",
            ],
            cwd=pytester.path,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + INNER_TIMEOUT
        while not ready.exists():
            assert inner.poll() is None, f"inner pytest ended early:\n{output.read_text()}"
            assert time.monotonic() < deadline, "inner VM not up within the bound"
            time.sleep(0.5)
        qemus = _qemu_descendants(inner.pid)
        assert qemus, "no QEMU child of the inner pytest found"
        leftovers = _vm_dirs(qemus)
    finally:
        if inner.poll() is None:
            os.kill(inner.pid, signal.SIGKILL)
        inner.wait(timeout=30)
    deadline = time.monotonic() + 30
    while any(Path(f"/proc/{pid}").exists() for pid in qemus):
        assert time.monotonic() < deadline, f"QEMU {qemus} still alive 30 s after SIGKILL"
        time.sleep(0.2)
    # A SIGKILLed pytest cannot remove its VM's folders (the workdir with the disk overlay,
    # the sockets); the next process to make one (a VM's, a LAN's) removes them.
    assert leftovers and all(folder.is_dir() for folder in leftovers), leftovers
    shutil.rmtree(make_run_dir("adare-next-"))
    assert [folder for folder in leftovers if folder.exists()] == []


# The examples on debian-xfce share one desktop VM (its TCG boot is minutes) and run in
# tests/e2e/test_examples_xfce.py, beside this module on the other worker; the two inner
# runs together are the README's `pytest --adare-vm=debian conftest_examples`, each within
# its own bound.
EXAMPLES = Path(__file__).resolve().parents[2] / "conftest_examples"
XFCE_EXAMPLES = ("playbooks", "test_xfce_desktop.py", "test_tool_validation.py")


def run_examples(pytester: pytest.Pytester, test_image: str, *args: str) -> pytest.RunResult:
    """Run examples (options, paths, ``--ignore``s) on ``test_image``; none fails."""
    result = run_inner(pytester, "-rs", f"--adare-vm={test_image}", *args)
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed", 0) == 0 and outcomes.get("errors", 0) == 0, result.stdout.str()
    return result


def test_the_examples_pass(pytester: pytest.Pytester, test_image: str) -> None:
    elsewhere = [f"--ignore={EXAMPLES / name}" for name in XFCE_EXAMPLES]
    assert run_examples(pytester, test_image, *elsewhere, str(EXAMPLES)).parseoutcomes().get(
        "passed", 0) >= 4
