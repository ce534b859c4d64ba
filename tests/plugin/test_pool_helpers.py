"""Pure helpers of the plugin: artifact directory names and the keep hint's command line."""

from __future__ import annotations

import shlex
import shutil
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

from pytest_adare.machine.spec import MachineSpec
from pytest_adare.plugin.fixtures import sanitise_nodeid
from pytest_adare.plugin.options import VMRequest
from pytest_adare.plugin.pool import KEPT_SOCKET_NAME, PooledVM, keep_hint, kept_sockets_dir
from pytest_adare.qemu.argv import MachineConfig, build_qemu_argv
from pytest_adare.qemu.machine import Machine
from pytest_adare.vm_options import VMOptions


def test_nodeids_become_safe_directory_names() -> None:
    assert sanitise_nodeid("tests/test_x.py::test_y[a/b-1]") == "tests_test_x.py_test_y_a_b-1"
    assert sanitise_nodeid("::") == "test"
    assert len(sanitise_nodeid("a" * 500)) == 200


def kept_vm(tmp_path: Path, ready_saved: bool, incoming: bool = False) -> PooledVM:
    run_sockets = Path("/tmp/adare-run-xyz")
    config = MachineConfig(
        spec=MachineSpec(incoming=incoming),
        qmp_path=run_sockets / "qmp.sock",
        agent_serial_path=run_sockets / "agent-serial.sock",
        qga_path=run_sockets / "qga.sock",
        disk=tmp_path / "disk-overlay.qcow2",
    )
    image = SimpleNamespace(memory_mib=None, kernel=None)
    machine = Machine(cast(Any, image), tmp_path / "vm")
    machine.launched_config, machine.overlay_path = config, tmp_path / "disk-overlay.qcow2"
    vm = cast(Any, SimpleNamespace(machine=machine, options=VMOptions()))
    request = VMRequest(image="debian", options=VMOptions(), isolation="snapshot")
    return PooledVM(vm, request, cast(Any, None), tmp_path, ready_saved=ready_saved)


def test_keep_hint_boots_the_same_machine_with_qmp_listening_in_the_kept_dir(
    tmp_path: Path,
) -> None:
    hint = keep_hint(kept_vm(tmp_path, ready_saved=True))
    argv = shlex.split(hint.split("boot it again: ", 1)[1])
    sockets = tmp_path / "sockets"
    if len(str(sockets / KEPT_SOCKET_NAME)) > 107:  # a deep basetemp: a short private one
        sockets = next(Path(a.split("path=")[1]).parent for a in argv if "id=qmp," in a)
        assert sockets.name.startswith("adare-kept-")
        shutil.rmtree(sockets)
    assert f"socket,id=qmp,path={sockets / 'qmp.sock'},server=on,wait=off" in argv
    assert "/tmp/adare-run-xyz" not in hint
    assert argv[-2:] == ["-loadvm", "adare-ready"]
    assert str(tmp_path / "disk-overlay.qcow2") in hint


def test_keep_hint_after_a_warm_start_loads_the_ready_state_without_waiting_for_a_migration(
    tmp_path: Path,
) -> None:
    # QEMU refuses -incoming beside -loadvm ("mutually exclusive"); tests/e2e runs it.
    argv = shlex.split(keep_hint(kept_vm(tmp_path, True, incoming=True)).split("again: ", 1)[1])
    assert "-incoming" not in argv and argv[-2:] == ["-loadvm", "adare-ready"]


def test_keep_hint_without_a_ready_state_boots_cold(tmp_path: Path) -> None:
    hint = keep_hint(kept_vm(tmp_path, ready_saved=False))
    assert "-loadvm" not in hint


def test_the_test_runs_qmp_client_socket_differs_only_in_listening() -> None:
    paths = {"qmp_path": Path("/s/qmp.sock"), "agent_serial_path": Path("/s/a.sock")}
    base = MachineConfig(**paths, disk=Path("/d.qcow2"))
    client = build_qemu_argv(base)
    server = build_qemu_argv(MachineConfig(**paths, disk=Path("/d.qcow2"), qmp_listen=True))
    changed = [(a, b) for a, b in zip(client, server, strict=True) if a != b]
    assert changed == [
        (
            "socket,id=qmp,path=/s/qmp.sock,server=off",
            "socket,id=qmp,path=/s/qmp.sock,server=on,wait=off",
        )
    ]


def test_a_kept_machines_sockets_fit_the_kernels_limit_however_deep_the_workdir(
    tmp_path: Path,
) -> None:
    short = Path(tempfile.mkdtemp(prefix="kept-"))  # tmp_path's own length varies
    try:
        near = kept_sockets_dir(short)
        assert near == short / "sockets" and near.is_dir()
    finally:
        shutil.rmtree(short)
    deep = tmp_path / ("d" * 60) / ("e" * 60)  # an xdist worker's basetemp, a long project
    deep.mkdir(parents=True)
    chosen = kept_sockets_dir(deep)
    assert len(str(chosen / KEPT_SOCKET_NAME)) <= 107 and chosen.is_dir()
    assert (chosen.stat().st_mode & 0o777) == 0o700 and not (deep / "sockets").exists()
    chosen.rmdir()
