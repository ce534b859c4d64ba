"""Warm start on the built-in console image: the second VM of a combination loads the ready
state the first saved, is re-keyed, has the host's clock, and starts from the saved state
(not from what an earlier VM did later); a broken saved state falls back to a cold boot."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from image_under_test import image_under_test

from pytest_adare import launch
from pytest_adare.agent.websocket_client import AgentClient
from pytest_adare.errors import AgentUnreachable
from pytest_adare.loop_thread import shared_loop
from pytest_adare.machine_tools.saved_state import find_state, states_root

pytestmark = pytest.mark.e2e


def phase_names(lines: list[str]) -> list[str]:
    return [line.split()[1].rstrip(":") for line in lines]


def test_a_later_vm_starts_warm_re_keyed_with_the_host_clock(tmp_path: Path) -> None:
    manifest = image_under_test()
    image = manifest.path or manifest.disk
    with launch(image, workdir=tmp_path / "first", progress=None) as first:
        first.guest.shell("echo written-after-ready > /root/later.txt").check()
        key = next(p.detail for p in first.phases if p.name in ("warm", "warm-save"))
    lines: list[str] = []
    with launch(image, workdir=tmp_path / "second", progress=lines.append) as second:
        names = [p.name for p in second.phases]
        assert "warm" in names and "boot" not in names and "install" not in names, lines
        assert any("agent re-keyed" in p.detail for p in second.phases)
        # Failure reports still show how the guest booted: the saved boot's console lines.
        tail = second.console_tail(400)
        marker = next(i for i, line in enumerate(tail) if "adare: warm start" in line)
        assert any("adare-init: agent started" in line for line in tail[:marker])
        # The saved state is from before the first VM wrote its file.
        assert second.guest.shell("test -e /root/later.txt").returncode == 1
        # The guest clock is the host's, not the moment the state was saved.
        guest_now = float(second.guest.shell("date -u +%s.%N").check().stdout)
        assert abs(guest_now - time.time()) < 30
        directory = state_dir(key.split()[2])
        saved = find_state(directory.name, directory.parent)
        assert saved is not None
        old_token = saved.meta["agent_token"]
        assert old_token != second.token

        async def connect(token: str) -> None:
            client = await AgentClient.connect(
                "127.0.0.1", second.machine.agent_port, token, attempts=1
            )
            await client.close()

        shared_loop().run(connect(second.token), timeout=60)
        with pytest.raises(AgentUnreachable):
            shared_loop().run(connect(old_token), timeout=60)
        # Per-test isolation works on a warm-started VM too.
        second.save_ready()
        second.guest.shell("touch /root/dirty").check()
        second.restore_ready()
        assert second.guest.shell("test -e /root/dirty").returncode == 1


def state_dir(key_prefix: str) -> Path:
    [match] = [p for p in states_root().iterdir() if p.name.startswith(key_prefix)]
    return match


def test_warm_off_boots_cold(tmp_path: Path) -> None:
    manifest = image_under_test()
    with launch(
        manifest.path or manifest.disk, workdir=tmp_path, progress=None, warm="off"
    ) as vm:
        names = [p.name for p in vm.phases]
        assert "boot" in names and "warm" not in names and "warm-save" not in names


def test_a_broken_saved_state_falls_back_to_a_cold_boot_and_is_saved_again(
    tmp_path: Path,
) -> None:
    manifest = image_under_test()
    image = manifest.path or manifest.disk
    # Its own combination (memory), so other tests' states are not touched.
    with launch(image, workdir=tmp_path / "a", progress=None, memory_mib=288) as first:
        detail = next(p.detail for p in first.phases if p.name in ("warm", "warm-save"))
    directory = state_dir(detail.split()[2])
    (directory / "state.bin").write_bytes(b"not a migration stream")
    lines: list[str] = []
    with launch(image, workdir=tmp_path / "b", progress=lines.append, memory_mib=288) as vm:
        assert any("warm: start failed" in line and "booting cold" in line for line in lines)
        names = [p.name for p in vm.phases]
        assert "boot" in names and "warm-save" in names
        assert vm.guest.shell("echo ok").stdout == "ok\n"
    assert (directory / "state.bin").stat().st_size > 1_000_000


def test_warm_started_vms_do_not_share_the_saved_random_state(tmp_path: Path) -> None:
    """Two VMs loaded from one saved state would draw the same "random" numbers (the
    kernel's RNG state is part of the saved RAM; seen before the fix: the same
    ``/proc/sys/kernel/random/uuid`` in both); the host reseeds it with ``seed_random``."""
    manifest = image_under_test()
    image = manifest.path or manifest.disk
    with launch(image, workdir=tmp_path / "saver", progress=None):
        pass  # a saved state exists from here on
    drawn = []
    for name in ("a", "b"):
        with launch(image, workdir=tmp_path / name, progress=None) as vm:
            assert "warm" in [p.name for p in vm.phases]
            assert any("RNG reseeded" in p.detail for p in vm.phases if p.name == "connect")
            drawn.append(vm.guest.shell("cat /proc/sys/kernel/random/uuid").check().stdout)
    assert drawn[0] != drawn[1], drawn
