"""The QEMU command line, built from a MachineConfig without running QEMU."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from pytest_adare.qemu.argv import MachineConfig, build_qemu_argv

BASE = MachineConfig(
    qmp_path=Path("/run/vm/qmp.sock"),
    agent_serial_path=Path("/run/vm/agent-serial.sock"),
    qga_path=Path("/run/vm/qga.sock"),
    disk=Path("/work/vm/disk-overlay.qcow2"),
    kernel=Path("/images/vmlinuz"),
    initrd=Path("/images/initrd.img"),
    append="console=ttyS0 panic=-1",
)


def respec(config: MachineConfig, **fields: Any) -> MachineConfig:
    """``config`` with these fields of its machine spec changed."""
    return replace(config, spec=replace(config.spec, **fields))


def values(argv: list[str], option: str) -> list[str]:
    """Every value given to ``option`` in argv, in order."""
    return [argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == option]


def test_starts_with_the_binary_and_drops_every_default_device() -> None:
    argv = build_qemu_argv(BASE)
    assert argv[0] == "qemu-system-x86_64"
    assert {"-nodefaults", "-no-user-config", "-no-reboot"} <= set(argv)
    assert values(argv, "-machine") == ["q35"]
    assert values(argv, "-m") == ["1024"] and values(argv, "-smp") == ["1"]


def test_tcg_has_no_cpu_model_and_kvm_takes_the_probed_one() -> None:
    tcg = build_qemu_argv(BASE)
    assert values(tcg, "-accel") == ["tcg"] and "-cpu" not in tcg
    kvm = build_qemu_argv(replace(BASE, accel="kvm", cpu_model="qemu64"))
    assert values(kvm, "-accel") == ["kvm"] and values(kvm, "-cpu") == ["qemu64"]


def test_disk_is_the_overlay_on_virtio_blk() -> None:
    argv = build_qemu_argv(BASE)
    (drive,) = values(argv, "-drive")
    assert drive.startswith("file=/work/vm/disk-overlay.qcow2,format=qcow2,if=none,id=disk0")
    assert "virtio-blk-pci,drive=disk0" in values(argv, "-device")


def test_share_disks_are_read_only_and_come_after_the_system_disk() -> None:
    # The guest names virtio disks in PCI slot order: the system disk must stay /dev/vda.
    argv = build_qemu_argv(respec(BASE, share_disks=(Path("/work/vm/share0.raw"),)))
    drives, devices = values(argv, "-drive"), values(argv, "-device")
    assert drives[1] == "file=/work/vm/share0.raw,format=raw,if=none,id=share0,readonly=on"
    blk = [d for d in devices if d.startswith("virtio-blk-pci")]
    assert blk == ["virtio-blk-pci,drive=disk0", "virtio-blk-pci,drive=share0,serial=adare-share0"]


def test_direct_kernel_boot_passes_kernel_initrd_and_command_line() -> None:
    argv = build_qemu_argv(BASE)
    assert values(argv, "-kernel") == ["/images/vmlinuz"]
    assert values(argv, "-initrd") == ["/images/initrd.img"]
    assert values(argv, "-append") == ["console=ttyS0 panic=-1"]


def test_firmware_boot_has_no_kernel_options() -> None:
    config = replace(BASE, kernel=None, initrd=None, append=None, firmware=Path("/fw/OVMF.fd"))
    argv = build_qemu_argv(config)
    assert not {"-kernel", "-initrd", "-append"} & set(argv)
    assert values(argv, "-bios") == ["/fw/OVMF.fd"]


def test_console_is_the_first_serial_port_and_the_agent_link_the_second() -> None:
    argv = build_qemu_argv(BASE)
    assert values(argv, "-serial") == ["chardev:console", "chardev:agentser"]
    chardevs = values(argv, "-chardev")
    assert "stdio,id=console,signal=off" in chardevs
    assert "socket,id=agentser,path=/run/vm/agent-serial.sock,server=on,wait=off" in chardevs


def test_qga_is_a_virtio_serial_port_named_for_qemu_ga() -> None:
    argv = build_qemu_argv(BASE)
    assert "socket,id=qga,path=/run/vm/qga.sock,server=on,wait=off" in values(argv, "-chardev")
    assert "virtserialport,bus=vser0.0,chardev=qga,name=org.qemu.guest_agent.0" in values(
        argv, "-device"
    )
    no_qga = build_qemu_argv(replace(BASE, qga_path=None))
    assert not any("guest_agent" in arg for arg in no_qga)


def test_the_agent_link_can_be_a_virtio_serial_port_instead_of_the_uart() -> None:
    virtio = respec(BASE, agent_link="virtio")
    for config in (virtio, replace(virtio, qga_path=None)):
        argv = build_qemu_argv(config)
        assert values(argv, "-serial") == ["chardev:console"]  # no ttyS1
        devices = values(argv, "-device")
        assert "virtserialport,bus=vser0.0,chardev=agentser,name=org.adare.agent.0" in devices
        assert devices.count("virtio-serial-pci,id=vser0") == 1
    assert "org.adare.agent.0" not in " ".join(build_qemu_argv(BASE))


def test_qemu_connects_to_the_hosts_qmp_socket() -> None:
    argv = build_qemu_argv(BASE)
    assert "socket,id=qmp,path=/run/vm/qmp.sock,server=off" in values(argv, "-chardev")
    assert values(argv, "-mon") == ["chardev=qmp,mode=control"]


def test_display_gives_a_vga_for_screendump_and_a_tablet_for_absolute_input() -> None:
    argv = build_qemu_argv(BASE)
    assert values(argv, "-vga") == ["std"] and values(argv, "-display") == ["none"]
    assert "usb-tablet,bus=usb0.0" in values(argv, "-device")
    headless = build_qemu_argv(replace(BASE, display=False))
    assert "-vga" not in headless and not any("usb-tablet" in a for a in headless)
    assert values(headless, "-display") == ["none"]


def test_network_forwards_a_kernel_chosen_loopback_port_to_the_agent() -> None:
    argv = build_qemu_argv(BASE)
    assert values(argv, "-netdev") == ["user,id=net0,hostfwd=tcp:127.0.0.1:0-:18765"]
    assert "virtio-net-pci,netdev=net0,addr=0x2,romfile=,guest_announce=off" in values(
        argv, "-device"
    )


def test_the_nic_takes_pci_slot_2_before_any_other_device_is_numbered() -> None:
    """enp0s2 in a systemd guest, as the Debian installer configures it on q35."""
    devices = values(build_qemu_argv(BASE), "-device")
    assert devices[0].startswith("virtio-net-pci,") and "addr=0x2" in devices[0]
    assert not any("addr=" in device for device in devices[1:])


def test_uefi_boots_ovmf_code_read_only_and_a_qcow2_copy_of_the_variables() -> None:
    config = replace(
        BASE, kernel=None, initrd=None, append=None,
        uefi_code=Path("/usr/share/OVMF/OVMF_CODE_4M.fd"), uefi_vars=Path("/w/uefi-vars.qcow2"),
    )  # fmt: skip
    argv = build_qemu_argv(config)
    drives = values(argv, "-drive")
    assert "if=pflash,unit=0,format=raw,readonly=on,file=/usr/share/OVMF/OVMF_CODE_4M.fd" in drives
    assert "if=pflash,unit=1,format=qcow2,file=/w/uefi-vars.qcow2" in drives
    assert "name=opt/org.tianocore/IPv4PXESupport,string=n" in values(argv, "-fw_cfg")
    assert "virtio-blk-pci,drive=disk0,bootindex=1" in values(argv, "-device")
    assert not any("pflash" in drive for drive in values(build_qemu_argv(BASE), "-drive"))


def test_the_firmware_log_is_the_debug_port_in_a_file() -> None:
    argv = build_qemu_argv(replace(BASE, firmware_log=Path("/w/firmware.log")))
    assert "file,id=fwlog,path=/w/firmware.log" in values(argv, "-chardev")
    assert "isa-debugcon,iobase=0x402,chardev=fwlog" in values(argv, "-device")


def test_no_network_means_no_nic_at_all() -> None:
    argv = build_qemu_argv(respec(BASE, network=False))
    assert "-netdev" not in argv
    assert values(argv, "-nic") == ["none"]


def test_fw_cfg_files_are_handed_to_the_guest_in_name_order() -> None:
    config = respec(BASE,
        fw_cfg={"opt/adare/config.json": Path("/w/c.json"), "opt/adare/bundle.pyz": Path("/b")},
    )
    assert values(build_qemu_argv(config), "-fw_cfg") == [
        "name=opt/adare/bundle.pyz,file=/b",
        "name=opt/adare/config.json,file=/w/c.json",
    ]


def test_commas_in_paths_are_escaped_for_qemu_option_syntax() -> None:
    config = replace(BASE, disk=Path("/a,b/disk.qcow2"), qmp_path=Path("/s,x/qmp.sock"))
    argv = build_qemu_argv(config)
    assert values(argv, "-drive")[0].startswith("file=/a,,b/disk.qcow2,format=qcow2")
    assert "socket,id=qmp,path=/s,,x/qmp.sock,server=off" in values(argv, "-chardev")


def test_extra_args_come_last_so_they_can_add_devices() -> None:
    argv = build_qemu_argv(replace(BASE, extra_args=("-device", "virtio-rng-pci")))
    assert argv[-2:] == ["-device", "virtio-rng-pci"]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"memory_mib": 16}, "memory_mib"),
        ({"uefi_code": Path("/c.fd")}, "both uefi_code and uefi_vars"),
        (
            {"uefi_code": Path("/c.fd"), "uefi_vars": Path("/v"), "firmware": Path("/b")},
            "either firmware",
        ),
        ({"cpus": 0}, "cpus"),
        ({"accel": "hvf"}, "accel"),
        ({"kernel": None}, "need a kernel"),
        ({"kernel": None, "initrd": None, "append": None, "disk": None}, "nothing to boot"),
        ({"guest_agent_port": 0}, "guest_agent_port"),
    ],
)
def test_bad_configs_are_rejected_with_the_reason(changes: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        replace(BASE, **changes)  # type: ignore[arg-type]


def test_lan_ports_are_dgram_netdevs_on_unix_sockets_in_their_own_slots() -> None:
    from pytest_adare.lan.port import lan_port

    ports = (
        lan_port(0, "02:ad:00:00:00:01", socket="/run/lan/m0.sock", peer="/run/lan/f0.sock"),
        lan_port(1, "02:ad:00:00:01:01", socket="/run/l,an/m1.sock", peer="/run/lan/f1.sock"),
    )
    argv = build_qemu_argv(respec(BASE, network=False, lan_ports=ports))
    assert values(argv, "-netdev") == [
        "dgram,id=lan0,local.type=unix,local.path=/run/lan/m0.sock,"
        "remote.type=unix,remote.path=/run/lan/f0.sock",
        "dgram,id=lan1,local.type=unix,local.path=/run/l,,an/m1.sock,"
        "remote.type=unix,remote.path=/run/lan/f1.sock",
    ]
    nics = [d for d in values(argv, "-device") if d.startswith("virtio-net-pci")]
    assert nics == [
        "virtio-net-pci,netdev=lan0,mac=02:ad:00:00:00:01,addr=0x10,romfile=,guest_announce=off",
        "virtio-net-pci,netdev=lan1,mac=02:ad:00:00:01:01,addr=0x11,romfile=,guest_announce=off",
    ]
    assert values(argv, "-nic") == ["none"]  # no user-mode NIC: the segment only
    assert not any("tap" in a or "bridge" in a or "mcast" in a for a in argv)


def test_a_lan_port_without_sockets_is_refused_on_qemu() -> None:
    from pytest_adare.lan.port import lan_port

    libvirt_only = lan_port(0, "02:ad:00:00:00:01", network="adare-net")
    with pytest.raises(ValueError, match="socket paths"):
        respec(BASE, lan_ports=(libvirt_only,))
    with pytest.raises(ValueError, match="MAC"):
        lan_port(0, "02:AD:zz", socket="a", peer="b")


def test_a_virtio_rng_is_fed_from_the_hosts_urandom_when_asked() -> None:
    assert "virtio-rng-pci,rng=rng0" not in values(build_qemu_argv(BASE), "-device")
    argv = build_qemu_argv(respec(BASE, rng=True))
    assert values(argv, "-object") == ["rng-random,id=rng0,filename=/dev/urandom"]
    assert "virtio-rng-pci,rng=rng0" in values(argv, "-device")
