"""A user's readiness command decides when a VM is ready (issue 11 item 8), on the
built-in image under real QEMU. Both VMs boot cold (``warm="off"``) so the cache keeps
no state saved for these commands."""

from __future__ import annotations

from pathlib import Path

import pytest
from image_under_test import image_under_test

from pytest_adare import launch
from pytest_adare.errors import VMTimeout

pytestmark = pytest.mark.e2e


def test_the_vm_is_ready_once_the_command_exits_0(tmp_path: Path) -> None:
    manifest = image_under_test()
    # Fails on its first run (leaving a mark), succeeds on the next.
    command = "test -e /tmp/adare-ready || { touch /tmp/adare-ready; echo not yet; exit 1; }"
    with launch(manifest.path or manifest.disk, warm="off", ready_command=command,
                workdir=tmp_path, progress=None) as vm:  # fmt: skip
        [settle] = [phase for phase in vm.phases if phase.name == "settle"]
        assert settle.detail == "ready command exited 0 (try 2)"
        assert vm.guest.shell("test -e /tmp/adare-ready").returncode == 0


def test_a_command_that_never_exits_0_times_out_naming_it(tmp_path: Path) -> None:
    manifest = image_under_test()
    command = "echo waiting for the app; exit 3"
    with pytest.raises(VMTimeout) as caught:
        with launch(manifest.path or manifest.disk, warm="off", ready_command=command,
                    ready_timeout=3, workdir=tmp_path, progress=None):  # fmt: skip
            pass
    message = str(caught.value)
    assert f"the ready command {command!r} to exit 0" in message
    assert "last: exit 3: waiting for the app)" in message
    assert caught.value.console_tail, message
