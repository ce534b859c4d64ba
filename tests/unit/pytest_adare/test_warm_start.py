"""The warm-start cache without QEMU: keys, eligibility, saving, publishing, finding."""

from __future__ import annotations

import asyncio
import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from pytest_adare.errors import MigrationError
from pytest_adare.image.manifest import ImageManifest
from pytest_adare.machine.registry import backend_for
from pytest_adare.machine_tools.accel import AccelChoice
from pytest_adare.machine_tools.saved_state import (
    find_state,
    prune_states,
    save_machine_state,
    state_key,
)
from pytest_adare.qemu.migration import save_state
from pytest_adare.vm_options import VMOptions
from pytest_adare.warm_start import boot_files, saved_boot_inputs, warm_plan
from tests.fakes.machine import FakeMachine

TCG = AccelChoice("tcg", None, "accel: tcg (test)")


def fake_machine(overlay: Path, fail: bool = False) -> FakeMachine:
    machine = FakeMachine(None, overlay.parent, fail_state=fail)
    machine.overlay_path = overlay
    return machine


class QmpAnswers:
    """Answers the QMP commands the QEMU backend's migration sends; ``migrate`` writes
    the stream file."""

    name = "qmp"

    def __init__(self) -> None:
        self.sent: list[str] = []

    async def aqmp(self, cmd: str, timeout: float = 60.0, **args: Any) -> Any:
        self.sent.append(cmd)
        if cmd == "migrate":
            target = args["uri"].split("> ", 1)[1].strip("'")
            await asyncio.to_thread(Path(target).write_bytes, b"QEVM")
        return {"status": "completed"} if cmd == "query-migrate" else {}

    async def bounded(self, coro: Any, timeout: float, what: str) -> Any:
        return await coro


def test_the_qemu_backend_saves_a_state_paused_in_one_pass(tmp_path: Path) -> None:
    qmp = QmpAnswers()
    assert asyncio.run(save_state(qmp, tmp_path / "state.bin")) == 4
    assert qmp.sent == ["stop", "migrate", "query-migrate"]


@pytest.fixture
def image(tmp_path: Path) -> ImageManifest:
    for name in ("disk.qcow2", "vmlinuz", "initrd.gz"):
        (tmp_path / name).write_bytes(name.encode())
    return ImageManifest(
        name="t",
        disk=tmp_path / "disk.qcow2",
        kernel=tmp_path / "vmlinuz",
        initrd=tmp_path / "initrd.gz",
        append="console=ttyS0",
        memory_mib=256,
    )


def plan(image: ImageManifest, root: Path, **changes: Any) -> Any:
    options = VMOptions(**changes.pop("options", {}))
    args: dict[str, Any] = {
        "accel": TCG,
        "bundle_hash": "bundle-a",
        "run_dir": "/adare/run",
        "handoff": "initrd",
        "root": root,
        "backend": backend_for(options),
    }
    args.update(changes)
    return warm_plan(image, options, **args)


def test_the_key_covers_every_fact_a_saved_state_depends_on(
    image: ImageManifest, tmp_path: Path
) -> None:
    root = tmp_path / "warm"
    base = plan(image, root).key
    assert base == plan(image, root).key  # stable
    others = {
        plan(image, root, bundle_hash="bundle-b").key,
        plan(image, root, accel=AccelChoice("kvm", "host", "kvm")).key,
        plan(image, root, options={"memory_mib": 512}).key,
        plan(image, root, options={"cpus": 2}).key,
        plan(image, root, run_dir="/other").key,
        plan(image, root, handoff="fw_cfg").key,
        plan(image, root, options={"transport": "serial", "network": False}).key,
        plan(image, root, ready_command="test -e /run/app.ready").key,
        plan(image, root, ready_command="systemctl is-active app").key,
    }
    assert base not in others and len(others) == 9
    (tmp_path / "vmlinuz").write_bytes(b"a rebuilt kernel")  # size and mtime change
    assert plan(image, root).key != base


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"options": {"warm": "off"}}, "warm start off"),
        ({"options": {"clock": "2024-03-01T09:00:00Z"}}, "scenario clock"),
        ({"options": {"share": "/srv:/src"}}, "a shared folder (its disk is attached at boot"),
        (
            {"options": {"hypervisor": "qemu:///system", "transport": "serial", "network": False}},
            "the libvirt backend cannot save and load a whole VM state",
        ),
        ({"custom_config": True}, "custom agent config"),
    ],
)
def test_what_must_boot_cold_says_why(
    image: ImageManifest, tmp_path: Path, change: dict[str, Any], reason: str
) -> None:
    cold = plan(image, tmp_path, **change)
    assert cold.key is None and cold.saved is None and reason in cold.reason


def test_a_firmware_booted_disk_boots_cold(tmp_path: Path) -> None:
    (tmp_path / "disk.img").write_bytes(b"x")
    cold = plan(ImageManifest(name="d", disk=tmp_path / "disk.img", format="raw"), tmp_path)
    assert cold.key is None and "firmware-booted" in cold.reason


def test_saving_publishes_a_complete_private_state_that_is_then_found(
    image: ImageManifest, tmp_path: Path
) -> None:
    root = tmp_path / "warm"
    first = plan(image, root)
    assert first.saved is None and "cold boot saves it" in first.reason
    overlay = tmp_path / "overlay.qcow2"
    overlay.write_bytes(b"overlay bytes")
    handoff = tmp_path / "handoff-initrd.gz"
    handoff.write_bytes(b"initrd with config")
    config = tmp_path / "config.json"
    config.write_bytes(b"{}")
    files, names = boot_files(handoff, {"opt/adare/config.json": config})
    machine = fake_machine(overlay)
    saved = asyncio.run(
        save_machine_state(
            machine, first.key, files, {"agent_token": "tok", "fw_cfg": names}, root=root
        )
    )
    assert machine.log == ["machine1.save_state"]
    assert saved.disk.read_bytes() == b"overlay bytes"
    assert stat.S_IMODE((saved.directory / "meta.json").stat().st_mode) == 0o600
    assert [p.name for p in root.iterdir() if p.name.startswith(".") and p.is_dir()] == []
    again = plan(image, root)
    assert again.saved is not None and again.saved.meta["agent_token"] == "tok"
    assert again.reason.endswith(f"saved under {TCG.reason}")  # a warm VM's accel verdict
    initrd, fw_cfg = saved_boot_inputs(again.saved)
    assert initrd is not None and initrd.read_bytes() == b"initrd with config"
    assert fw_cfg["opt/adare/config.json"].read_bytes() == b"{}"
    # A second save of the same key keeps the state that is there.
    other = fake_machine(overlay)
    assert asyncio.run(save_machine_state(other, first.key, {}, {}, root=root)) == saved
    assert other.log == []


def test_a_failed_migration_leaves_nothing_behind(image: ImageManifest, tmp_path: Path) -> None:
    root = tmp_path / "warm"
    key = plan(image, root).key
    overlay = tmp_path / "overlay.qcow2"
    overlay.write_bytes(b"x")
    with pytest.raises(MigrationError, match="disk full"):
        asyncio.run(save_machine_state(fake_machine(overlay, fail=True), key, {}, {}, root=root))
    assert list(root.iterdir()) == []
    assert find_state(key, root) is None


def test_an_incomplete_or_odd_directory_is_not_a_state(tmp_path: Path) -> None:
    key = state_key({"x": "1"})
    directory = tmp_path / key
    directory.mkdir()
    (directory / "state.bin").write_bytes(b"s")
    (directory / "disk.qcow2").write_bytes(b"d")
    assert find_state(key, tmp_path) is None  # no meta.json: not finished
    (directory / "meta.json").write_text(json.dumps({"agent_token": 5}))
    assert find_state(key, tmp_path) is None  # meta values must be strings
    (directory / "meta.json").write_text(json.dumps({"agent_token": "t"}))
    assert find_state(key, tmp_path) is not None
    (directory / "state.bin").unlink()
    assert find_state(key, tmp_path) is None


def test_only_the_most_recently_used_states_are_kept(tmp_path: Path) -> None:
    keys = [state_key({"n": str(n)}) for n in range(5)]
    for age, key in enumerate(keys):
        directory = tmp_path / key
        directory.mkdir()
        for name in ("state.bin", "disk.qcow2"):
            (directory / name).write_bytes(b"x")
        (directory / "meta.json").write_text("{}")
        os.utime(directory, (1000 + age, 1000 + age))  # keys[4] is the newest
    assert find_state(keys[0], tmp_path) is not None  # a use makes keys[0] the newest
    removed = prune_states(tmp_path, keep=2, spare=keys[1])
    assert sorted(removed) == sorted([keys[2], keys[3]])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([keys[0], keys[1], keys[4]])
