"""The one machine spec (``pytest_adare/machine/spec.py``): every field says how it meets
a saved state, each ``saved`` field moves the warm key, each ``cold`` field makes a VM
boot cold naming it, and a backend refuses the fields it never heard of."""

from __future__ import annotations

from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import pytest

from pytest_adare.host_access import ShareSpec
from pytest_adare.image.manifest import ImageManifest
from pytest_adare.lan.port import lan_port
from pytest_adare.machine.registry import backend_for
from pytest_adare.machine.spec import MachineSpec, spec_from_options, spec_parts
from pytest_adare.machine_tools.accel import AccelChoice
from pytest_adare.vm_options import VMOptions
from pytest_adare.warm_start import OPTIONS_BESIDE_THE_SPEC, warm_plan

PORT = lan_port(0, "02:ad:00:00:00:01", socket="/s/m0.sock", peer="/s/f0.sock")
OTHER_VALUE: dict[str, Any] = {
    # One value per ``saved`` field other than its default (a new field needs one here,
    # which is the point: its author says how it differs, and the key is checked to follow).
    "memory_mib": 512,
    "cpus": 2,
    "network": False,
    "rng": True,
    "agent_link": "virtio",
    "lan_ports": (PORT,),
    "rtc_base": "2024-03-01T09:00:00",
    "share_disks": (Path("/w/share0.raw"),),
    "shared_folders": (ShareSpec("/srv/project", "/src", writable=True),),
    "firmware": "uefi",
    "seed": Path("/w/cidata.iso"),
}


def test_every_field_says_how_it_meets_a_saved_state_and_what_it_is_called() -> None:
    parts = spec_parts()
    assert [f.name for f, _ in parts] == [f.name for f in fields(MachineSpec)]
    for f, info in parts:
        assert info.role in ("saved", "cold", "start"), f.name
        assert info.what and not info.what.endswith("."), f.name  # it is put in sentences


def test_each_saved_field_moves_the_key_and_nothing_else_does() -> None:
    base = MachineSpec()
    saved = [f.name for f, info in spec_parts() if info.role == "saved"]
    assert set(saved) <= set(OTHER_VALUE), f"give {set(saved) - set(OTHER_VALUE)} a value"
    for name in saved:
        assert replace(base, **{name: OTHER_VALUE[name]}).state_parts() != base.state_parts(), name
    for f, info in spec_parts():
        if info.role != "saved" and f.name in OTHER_VALUE:
            changed = replace(base, **{f.name: OTHER_VALUE[f.name]})
            assert changed.state_parts() == base.state_parts(), f.name


def test_each_cold_field_boots_cold_naming_itself() -> None:
    assert MachineSpec().cold_reasons() == []
    for f, info in spec_parts():
        if info.role == "cold":
            reasons = replace(MachineSpec(), **{f.name: OTHER_VALUE[f.name]}).cold_reasons()
            assert reasons == [info.why or info.what], f.name


def test_lan_members_share_a_key_whatever_their_sockets_and_macs() -> None:
    other = lan_port(0, "02:ad:00:00:00:02", socket="/t/m0.sock", peer="/t/f0.sock")
    assert MachineSpec(lan_ports=(PORT,)).state_parts() == MachineSpec(
        lan_ports=(other,)
    ).state_parts()


def test_every_option_is_a_spec_field_or_says_how_it_meets_a_saved_state() -> None:
    spec_fields = {f.name for f in fields(MachineSpec)}
    for option in fields(VMOptions):
        assert option.name in spec_fields or option.name in OPTIONS_BESIDE_THE_SPEC, option.name
    assert not set(OPTIONS_BESIDE_THE_SPEC) - {f.name for f in fields(VMOptions)}


def test_the_spec_takes_each_option_of_its_name_and_the_clock() -> None:
    options = VMOptions(memory_mib=512, cpus=2, accel="tcg", clock="2024-03-01T10:00:00+01:00")
    spec = spec_from_options(options, name="web", firmware="uefi")
    assert (spec.memory_mib, spec.cpus, spec.accel, spec.name) == (512, 2, "tcg", "web")
    assert spec.rtc_base == "2024-03-01T09:00:00" and spec.firmware == "uefi"
    assert spec_from_options(VMOptions(firmware="uefi")).firmware == "bios"  # the VM resolves it
    assert spec.memory_for(256) == 512 and MachineSpec().memory_for(256) == 256
    assert MachineSpec().memory_for(None) == 1024


@pytest.mark.parametrize(
    ("fields_", "message"),
    [
        ({"memory_mib": 16}, "memory_mib"),
        ({"cpus": 0}, "cpus"),
        ({"firmware": "coreboot"}, "firmware"),
        ({"rtc_base": "2024-03-01,clock=host"}, "rtc_base"),
        ({"fw_cfg": {"adare/config.json": Path("/c")}}, "opt/"),
        ({"lan_ports": (PORT, PORT)}, "same netdev"),
    ],
)
def test_a_bad_spec_is_refused_with_the_reason(fields_: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        MachineSpec(**fields_)


def test_the_warm_key_follows_the_agent_link_and_the_options_saved_fields(
    tmp_path: Path,
) -> None:
    for name in ("disk.qcow2", "vmlinuz"):
        (tmp_path / name).write_bytes(name.encode())
    image = ImageManifest(name="t", disk=tmp_path / "disk.qcow2", kernel=tmp_path / "vmlinuz")

    def key(options: VMOptions, **more: Any) -> str | None:
        return warm_plan(
            image, options, accel=AccelChoice("tcg", None, "tcg"), bundle_hash="b",
            run_dir="/r", handoff="initrd", backend=backend_for(options), root=tmp_path, **more,
        ).key  # fmt: skip

    base = key(VMOptions())
    assert base is not None and base == key(VMOptions(accel="tcg"))  # the choice is keyed
    assert key(VMOptions(), agent_link="virtio") != base
    assert key(VMOptions(lan_ports=(PORT,))) != base


def test_a_new_machine_option_reaches_the_key_and_a_backend_that_lacks_it_refuses_it(
    tmp_path: Path,
) -> None:
    # rng was added in three files (vm_options.py, machine/spec.py, qemu/argv.py): the
    # option is copied into the spec by name, keyed, and refused where not honoured.
    from pytest_adare.libvirt_backend.machine import LibvirtMachine
    from pytest_adare.machine.base import UnsupportedFeature

    assert spec_from_options(VMOptions(rng=True)).rng
    assert MachineSpec(rng=True).state_parts() != MachineSpec().state_parts()
    image: Any = ImageManifest(name="t", disk=tmp_path / "d.qcow2", kernel=tmp_path / "k")
    with pytest.raises(UnsupportedFeature, match=r"^a virtio RNG: not supported on the libvirt"):
        LibvirtMachine(image, tmp_path, MachineSpec(rng=True), uri="qemu:///system")
