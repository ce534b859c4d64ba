"""The host runtime end to end on the built-in image under real QEMU (TCG here).

The image comes from ``$ADARE_TEST_IMAGE``, else the built-in ``debian`` image
(see ``image_under_test.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from image_under_test import image_under_test

from pytest_adare import launch
from pytest_adare.agent.install import (
    GuestLayout,
    agent_config,
    install_agent,
    new_token,
    stop_agent,
)
from pytest_adare.agent.serial_client import SerialAgentClient
from pytest_adare.agent.transfer import binary_transport
from pytest_adare.agent.websocket_client import AgentClient
from pytest_adare.errors import AgentUnreachable
from pytest_adare.guest import AsyncGuest, Guest
from pytest_adare.image.agent_bundle import build_agent_bundle
from pytest_adare.image.manifest import AgentSpec, ImageManifest
from pytest_adare.loop_thread import shared_loop
from pytest_adare.machine.spec import MachineSpec
from pytest_adare.machine_tools.qga import AsyncQGAClient
from pytest_adare.machine_tools.screen import QemuScreen
from pytest_adare.qemu.machine import Machine
from pytest_adare.vm import VM
from pytest_adare.vm_phases.state import agent_link_for

pytestmark = pytest.mark.e2e
BAKED = GuestLayout("linux", "/adare/run", None)  # where the built-in image bakes its agent


@pytest.fixture(scope="module")
def manifest() -> ImageManifest:
    return image_under_test()


@pytest.fixture(scope="module")
def vm(manifest: ImageManifest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VM]:
    lines: list[str] = []
    with launch(manifest.path or manifest.disk, progress=lines.append,
                workdir=tmp_path_factory.mktemp("vm")) as running:  # fmt: skip
        running.progress_lines = lines  # type: ignore[attr-defined]
        yield running


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_start_reports_one_line_per_phase(vm: VM) -> None:
    names = [p.name for p in vm.phases]
    assert names[0] == "bundle" and "connect" in names and "gui" in names
    cold = "qemu" in names and ("boot" in names or "install" in names)
    assert cold or "warm" in names, names
    lines: list[str] = vm.progress_lines  # type: ignore[attr-defined]
    # One line per phase, plus the one saying whether the VM starts warm or cold and why.
    phase_lines = [line for line in lines if line.endswith(" s)")]
    assert len(phase_lines) == len(names)
    [plan] = [line for line in lines if line not in phase_lines]
    assert plan.startswith("vm warm: ")


def test_shell_rc_stdout_stderr(vm: VM) -> None:
    r = vm.guest.shell("echo hi; echo oops >&2; exit 3")
    assert (r.returncode, r.stdout, r.stderr) == (3, "hi\n", "oops\n")


def test_push_pull_10_mib_with_hash_in_binary_messages(vm: VM, tmp_path: Path) -> None:
    assert binary_transport(vm.guest.aio.connection) is not None  # the agent offers them
    source = tmp_path / "ten.bin"
    source.write_bytes(os.urandom(10 * 2**20))
    vm.guest.push(source, "/tmp/ten.bin")
    guest_sum = vm.guest.shell("sha256sum /tmp/ten.bin").check().stdout.split()[0]
    assert guest_sum == sha256_of(source)
    back = vm.guest.pull("/tmp/ten.bin", tmp_path / "back.bin")
    assert sha256_of(back) == sha256_of(source)
    # The agent logs one line per finished call: "done ID TOOL success=... in ... s".
    calls = [line.split(" done ", 1)[1].split()[1] for line in vm.agent_log_tail(200)
             if " done " in line]  # fmt: skip
    assert {"push_file", "pull_file"} <= set(calls)
    assert not {"push_file_chunk", "pull_file_chunk"} & set(calls)


def test_fs_snapshot_diff(vm: VM) -> None:
    vm.guest.shell("mkdir -p /root/case && echo a > /root/case/keep && echo b > /root/case/gone")
    before = vm.guest.fs_snapshot("/root/case")
    vm.guest.shell("rm /root/case/gone; echo c > /root/case/new; echo aa >> /root/case/keep")
    diff = vm.guest.fs_snapshot("/root/case").diff(before)
    assert diff.created == {"/root/case/new"}
    assert diff.deleted == {"/root/case/gone"}
    assert "/root/case/keep" in diff.modified


def test_screenshot_via_host_screendump(vm: VM) -> None:
    direct = vm.screendump()
    # The guest says what its screen is: a framebuffer's size, else VGA text mode
    # (80x25 characters of 9x16 pixels), which a console image without a DRM driver keeps.
    framebuffer = vm.guest.shell("cat /sys/class/graphics/fb0/virtual_size")
    if framebuffer.returncode == 0:
        expected = tuple(int(v) for v in framebuffer.stdout.strip().split(","))
    else:
        expected = (720, 400)
    assert direct.size == expected
    assert direct.convert("L").getextrema()[1] > 0, "the screen is all black"
    host_gui = Guest(AsyncGuest(vm.guest.aio.connection, screen=QemuScreen(vm.machine)))
    routed = host_gui.screenshot()
    assert routed.size == direct.size


def test_dump_memory_can_leave_the_guest_paused_until_resume(vm: VM, tmp_path: Path) -> None:
    dump = vm.dump_memory(tmp_path / "memory.elf", resume=False)
    try:
        assert vm.machine.qmp("query-status")["status"] == "paused"
        with dump.open("rb") as handle:
            assert handle.read(4) == b"\x7fELF"
    finally:
        vm.resume()
    assert vm.machine.qmp("query-status")["status"] == "running"
    vm.resume()  # a running guest: nothing to do
    assert vm.machine.qmp("query-status")["status"] == "running"
    assert vm.guest.shell("echo back").check().stdout == "back\n"


def test_restore_ready_undoes_changes_and_reconnects(vm: VM) -> None:
    vm.save_ready()
    vm.guest.shell("touch /root/after-save").check()
    vm.restore_ready()
    assert vm.guest.shell("test -e /root/after-save").returncode == 1


def test_reboot_starts_from_a_clean_disk(vm: VM) -> None:
    vm.guest.shell("touch /root/before-reboot").check()
    vm.reboot()
    assert vm.guest.shell("test -e /root/before-reboot").returncode == 1
    names = [p.name for p in vm.phases]
    assert names[0] == "bundle" and "connect" in names  # the phases of the new start


def test_agent_log_tail_and_console_tail(vm: VM) -> None:
    assert vm.console_tail(200)
    assert any("listening" in line for line in vm.agent_log_tail(200))


def test_serial_transport_with_network_disabled(manifest: ImageManifest, tmp_path: Path) -> None:
    assert manifest.path is not None
    with launch(manifest.path, transport="serial", network=False, progress=None,
                workdir=tmp_path) as serial_vm:  # fmt: skip
        assert serial_vm.machine.agent_port is None
        assert "eth0" not in serial_vm.guest.shell("ls /sys/class/net").stdout
        assert serial_vm.guest.shell("echo over-serial").stdout == "over-serial\n"
        # File bytes travel raw over the UART (binary messages), both ways.
        source = tmp_path / "small.bin"
        source.write_bytes(os.urandom(100_000))
        serial_vm.guest.push(source, "/tmp/small.bin")
        back = serial_vm.guest.pull("/tmp/small.bin", tmp_path / "back.bin")
        assert back.read_bytes() == source.read_bytes()


def _moved_layout(manifest: ImageManifest) -> ImageManifest:
    """The image as a user's image: no fw_cfg hand-off, agent to be installed elsewhere."""
    agent = AgentSpec(serial_device=manifest.agent.serial_device, run_dir="/opt/adare/run")
    return replace(manifest, agent=agent)


async def wait_listening(machine: Machine, timeout: float = 120) -> None:
    """Until the agent's serial health report says it listens (Python starts slowly)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            if (await SerialAgentClient.ping_path(machine.agent_serial_path, 3.0))["listening"]:
                return
        await asyncio.sleep(0.2)
    raise AssertionError(f"the agent did not report listening within {timeout} s")


def test_install_pushes_the_bundle_when_the_baked_agent_is_removed(
    manifest: ImageManifest, tmp_path: Path
) -> None:
    user_image = _moved_layout(manifest)
    layout = GuestLayout.for_manifest(user_image)
    bundle = build_agent_bundle()
    token = new_token()
    config = agent_config(layout, token)
    link = agent_link_for(layout.serial_device)
    with Machine(user_image, tmp_path, MachineSpec(name="push", agent_link=link)) as machine:
        qga = AsyncQGAClient(machine.qga_path)

        async def scenario() -> tuple[str, str, str]:
            await qga.sync(timeout=300)
            await qga.exec(["mv", "/adare/agent/bundle.pyz", "/adare/agent/removed.pyz"])
            await stop_agent(qga, BAKED)
            first = await install_agent(qga, layout, bundle, config)
            assert machine.agent_port is not None
            await wait_listening(machine)
            client = await AgentClient.connect("127.0.0.1", machine.agent_port, token, backoff=0.5)
            where = await AsyncGuest(client).shell("ls /proc/self/ >/dev/null; echo $0")
            await client.close()
            second = await install_agent(qga, layout, bundle, config)
            await asyncio.sleep(1)  # the old agent answers the probe until it is gone
            await wait_listening(machine)
            client = await AgentClient.connect("127.0.0.1", machine.agent_port, token, backoff=0.5)
            assert client.server_info["bundle_hash"] == bundle.bundle_hash
            await client.close()
            await qga.close()
            return first.action, second.action, where.stdout

        first, second, shell = shared_loop().run(scenario(), timeout=600)
    assert (first, second) == ("installed", "skipped")
    assert shell.strip()


def _start_broken(manifest: ImageManifest, tmp_path: Path, **overrides: object) -> str:
    vm = VM(manifest, tmp_path, name="broken", config_overrides=overrides)
    try:
        with pytest.raises(AgentUnreachable) as caught:
            vm.start()
        return caught.value.diagnosis
    finally:
        vm.close()


def test_diagnosis_agent_listening_only_on_loopback(
    manifest: ImageManifest, tmp_path: Path
) -> None:
    diagnosis = _start_broken(manifest, tmp_path, host="127.0.0.1")
    assert diagnosis.startswith("the agent listens only on 127.0.0.1:18765 inside the guest")


def test_diagnosis_agent_not_running_names_its_last_log_line(vm: VM) -> None:
    """Last in the module: it breaks the shared VM's agent for good."""

    async def kill_agent() -> None:
        await vm.qga.sync(timeout=60)
        await vm.qga.exec(["mv", "/adare/agent/bundle.pyz", "/adare/agent/off.pyz"])
        await stop_agent(vm.qga, BAKED)

    shared_loop().run(kill_agent(), timeout=120)
    with pytest.raises(AgentUnreachable) as caught:
        vm.reconnect()
    diagnosis = caught.value.diagnosis
    assert diagnosis.startswith("the agent is not running in the guest (it exited)"), diagnosis
    assert "can't open file" in diagnosis


# Like firewalld's default zone: loopback passes, the agent's port from outside is dropped.
AGENT_PORT_FIREWALL = b"""
table inet adare_firewall {
    chain input {
        type filter hook input priority filter; policy accept;
        iifname != "lo" tcp dport 18765 drop
    }
}
"""
LOOPBACK_CONNECT = "import socket; socket.create_connection(('127.0.0.1', 18765), 10).close()"


def netfilter_modules(proc_modules: str) -> list[str]:
    """The netfilter modules named in the text of ``/proc/modules``."""
    names = (line.split()[0] for line in proc_modules.splitlines() if line.strip())
    return [name for name in names if name.startswith(("nf", "x_tables", "ip_tables"))]


def test_diagnosis_firewall_drop(manifest: ImageManifest, tmp_path: Path) -> None:
    with launch(manifest.path or manifest.disk, progress=None, workdir=tmp_path) as fw_vm:
        at_boot = fw_vm.guest.shell("command -v nft; cat /proc/modules").check().stdout
        assert "/nft\n" in at_boot, "the image has no nft: rebuild it (adare-image build debian)"
        assert netfilter_modules(at_boot) == [], "netfilter modules loaded at boot"

        async def firewall_the_agent_port() -> tuple[int, str, int, str]:
            # over QGA: the rule cuts the agent connection this would otherwise run over
            await fw_vm.qga.sync(timeout=60)
            added = await fw_vm.qga.exec(["nft", "-f", "-"], input_data=AGENT_PORT_FIREWALL)
            local = await fw_vm.qga.exec(["python3", "-c", LOOPBACK_CONNECT])
            loaded = await fw_vm.qga.exec(["cat", "/proc/modules"])
            return added.exitcode, added.stderr.decode(), local.exitcode, loaded.stdout.decode()

        added, error, local, loaded = shared_loop().run(firewall_the_agent_port(), timeout=120)
        assert added == 0, f"nft -f failed: {error}"
        assert local == 0, "the firewall also dropped the guest's own loopback connection"
        assert "nf_tables" in netfilter_modules(loaded), "nft did not load nf_tables on demand"
        with pytest.raises(AgentUnreachable) as caught:
            fw_vm.reconnect()
    diagnosis = caught.value.diagnosis
    named = "dropped: nftables rule in table inet adare_firewall chain input drops it"
    assert "inside the guest but the forwarded connection is" in diagnosis, diagnosis
    assert named in diagnosis and "18765 drop" in diagnosis, diagnosis
    assert caught.value.details["connect_errors"], "the host's connects did not fail"
