"""``--adare-keep``'s hint runs: the printed QEMU command line, after a cold and after a
warm start, starts QEMU on the kept disk and the guest runs there (the shell on its
serial console computes what is typed into it); then it is killed."""

from __future__ import annotations

import shlex
import subprocess
import time
from pathlib import Path

import pytest
from image_under_test import image_under_test

from pytest_adare.plugin.options import VMRequest
from pytest_adare.plugin.pool import VMPool
from pytest_adare.vm_options import VMOptions

pytestmark = pytest.mark.e2e

ANSWER_WAIT = 120.0
"""Seconds for the kept guest to answer: loadvm of ~200 MB under TCG on a busy host."""
TYPED, ANSWER = b"echo kept-$((6*7))\r", b"kept-42"
"""Only a running guest's shell turns the typed line into the answer (the echo of the
typed characters holds no ``42``)."""


def kept_hint(warm: str, tmp_path: Path) -> tuple[str, bool]:
    """Boot a VM as the plugin does, save its ready state, keep it: (hint, started warm)."""
    manifest = image_under_test()
    lines: list[str] = []
    pool = VMPool(lines.append, workdir_root=tmp_path)  # kept workdirs go with it
    options = VMOptions(warm="off") if warm == "off" else VMOptions()
    request = VMRequest(str(manifest.path or manifest.disk), options, "snapshot")
    pooled = pool.get(request)
    if warm == "auto" and not any(p.name == "warm" for p in pooled.vm.phases):
        pool.release(pooled, keep=False)  # that cold boot saved the state: the next loads it
        pooled = pool.get(request)
    started_warm = any(p.name == "warm" for p in pooled.vm.phases)
    pool.prepare(pooled, "snapshot")  # the test run's first clean state: savevm adare-ready
    assert pooled.ready_saved, lines
    hint = pool.release(pooled, keep=True)
    assert hint is not None
    return hint, started_warm


def run_until_answer(argv: list[str], log: Path) -> str:
    """Start ``argv`` and type into its console until the guest's shell answers."""
    with log.open("wb") as out, subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT
    ) as qemu:
        assert qemu.stdin is not None
        try:
            deadline = time.monotonic() + ANSWER_WAIT
            while time.monotonic() < deadline:
                if qemu.poll() is not None:
                    pytest.fail(f"QEMU exited with {qemu.returncode}: {log.read_text()[-2000:]}")
                if ANSWER in log.read_bytes():
                    return log.read_text(errors="replace")
                qemu.stdin.write(TYPED)
                qemu.stdin.flush()
                time.sleep(2)
            pytest.fail(f"no answer in {ANSWER_WAIT:.0f} s: {log.read_text()[-2000:]}")
        finally:
            qemu.kill()
            qemu.wait()


@pytest.mark.parametrize("warm", ["off", "auto"])
def test_the_keep_hint_boots_the_kept_disk(warm: str, tmp_path: Path) -> None:
    hint, started_warm = kept_hint(warm, tmp_path)
    assert started_warm == (warm == "auto"), hint
    argv = shlex.split(hint.split("boot it again: ", 1)[1])
    assert argv[-2:] == ["-loadvm", "adare-ready"] and "-incoming" not in argv
    console = run_until_answer(argv, tmp_path / "kept-console.log")
    assert "mutually exclusive" not in console
