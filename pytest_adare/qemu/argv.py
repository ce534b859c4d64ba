"""The QEMU command line of one guest, built by a pure function (no QEMU needed to test it).

:class:`MachineConfig` says *what* the guest is; :func:`build_qemu_argv` says how QEMU
spells it. The wiring is fixed, because the host code relies on it:

- ``ttyS0`` (first ``isa-serial``) is the console, on QEMU's stdio: the host reads
  QEMU's stdout into ``console.log`` (nothing is lost before a reader connects) and
  can type into the console through QEMU's stdin. QEMU's own messages go to stderr.
- ``ttyS1`` is the agent's serial link, a listening Unix socket (``agent_serial_path``).
- virtio-serial port ``org.qemu.guest_agent.0`` is QGA, a listening Unix socket.
- QMP: QEMU *connects* to a Unix socket the host listens on before QEMU starts, so
  there is no window in which the host polls for a socket that is not there yet.
- network: user-mode with ``hostfwd=tcp:127.0.0.1:0-:18765``; the host port is chosen
  by the kernel and read back over QMP, so parallel VMs never race for a port. The NIC
  sits in PCI slot 2 (``NIC_PCI_SLOT``), so systemd's predictable name is ``enp0s2``, the
  name the Debian installer writes for a q35 guest; it has no option ROM (no PXE).
- LAN NICs (``lan_ports``): each a ``-netdev dgram`` between the guest's Unix datagram
  socket and the segment's (the host's forwarder, :mod:`pytest_adare.lan.forwarder`), a
  virtio NIC in its own PCI slot from ``0x10`` on, no option ROM, and no guest announce
  (``NIC_PROPERTIES``). No port, no bridge, no tap device: only the two socket
  files, in a private directory.
- firmware: SeaBIOS (QEMU's default), or UEFI from two pflash drives: the read-only
  OVMF code and this VM's own qcow2 copy of the variables store (qcow2 so ``savevm``,
  which needs every writable drive to take snapshots, keeps working). ``firmware_log``
  puts the firmware's debug port (``0x402``, where SeaBIOS logs) into a file.

Example::

    argv = build_qemu_argv(MachineConfig(qmp_path=Path("/run/vm/qmp.sock"),
                                         agent_serial_path=Path("/run/vm/agent.sock"),
                                         kernel=Path("vmlinuz"), append="console=ttyS0"))
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from adare_guest.config import DEFAULT_PORT, VIRTIO_PORT_NAME
from pytest_adare.machine.base import NETDEV_ID
from pytest_adare.machine.spec import NIC_PROPERTIES, MachineSpec, shared_folder_tag

AGENT_GUEST_PORT = DEFAULT_PORT
QGA_PORT_NAME = "org.qemu.guest_agent.0"
NIC_PCI_SLOT = 2
"""The NIC's PCI slot on q35 (``enp0s2`` in a systemd guest)."""
Accel = Literal["tcg", "kvm"]


@dataclass(frozen=True)
class MachineConfig:
    """Everything that decides one QEMU command line.

    ``disk`` is the per-VM overlay QEMU writes to (never the base image). ``kernel``
    (with optional ``initrd``/``append``) selects direct kernel boot; without it the
    firmware (``firmware`` or QEMU's default SeaBIOS) boots the disk.
    """

    qmp_path: Path
    agent_serial_path: Path
    spec: MachineSpec = field(default_factory=MachineSpec)
    """What the VM asked (:class:`~pytest_adare.machine.spec.MachineSpec`): its name,
    NICs, agent link, clock, seed, share disks, fw_cfg files and ``incoming``, spelt here
    as QEMU options. ``spec.agent_link`` says what carries the agent's serial link
    (``agent_serial_path``): the 16550 UART ``ttyS1`` (any guest; ~250 KiB/s under TCG) or
    the virtio-serial port ``VIRTIO_PORT_NAME`` (needs virtio drivers; megabytes per
    second). ``spec.memory_mib`` and ``spec.accel`` are resolved in ``memory_mib`` and
    ``accel``."""
    qmp_listen: bool = False
    """False: QEMU connects to the host's QMP server at ``qmp_path`` (the test run);
    True: QEMU listens there itself (a machine booted by hand from a kept disk)."""
    qga_path: Path | None = None
    qemu_binary: str = "qemu-system-x86_64"
    machine_type: str = "q35"
    memory_mib: int = 1024
    cpus: int = 1
    accel: Accel = "tcg"
    cpu_model: str | None = None
    disk: Path | None = None
    disk_format: str = "qcow2"
    kernel: Path | None = None
    initrd: Path | None = None
    append: str | None = None
    firmware: Path | None = None
    uefi_code: Path | None = None
    """OVMF's code (read-only pflash 0); with ``uefi_vars`` the guest boots UEFI."""
    uefi_vars: Path | None = None
    """This VM's qcow2 copy of OVMF's variables store (pflash 1)."""
    firmware_log: Path | None = None
    """File receiving the firmware's debug port (``isa-debugcon`` at ``0x402``)."""
    display: bool = True
    guest_agent_port: int = AGENT_GUEST_PORT
    virtiofs_sockets: Sequence[Path] = ()
    """The sockets of ``spec.shared_folders``' virtiofsd, one each, in order."""
    extra_args: Sequence[str] = ()

    def __post_init__(self) -> None:
        if self.memory_mib < 64:
            raise ValueError(f"memory_mib must be at least 64, got {self.memory_mib}")
        if self.cpus < 1:
            raise ValueError(f"cpus must be at least 1, got {self.cpus}")
        if self.accel not in ("tcg", "kvm"):
            raise ValueError(f"accel must be 'tcg' or 'kvm', got {self.accel!r}")
        if (self.initrd is not None or self.append is not None) and self.kernel is None:
            raise ValueError("initrd/append need a kernel (direct kernel boot)")
        if self.kernel is None and self.disk is None:
            raise ValueError("nothing to boot: give a disk, a kernel, or both")
        if (self.uefi_code is None) != (self.uefi_vars is None):
            raise ValueError("UEFI needs both uefi_code and uefi_vars")
        if self.uefi_code is not None and self.firmware is not None:
            raise ValueError("give either firmware (-bios) or uefi_code/uefi_vars, not both")
        if not 0 < self.guest_agent_port < 65536:
            raise ValueError(f"guest_agent_port out of range: {self.guest_agent_port}")
        if len(self.virtiofs_sockets) != len(self.spec.shared_folders):
            raise ValueError("each writable shared folder needs its virtiofsd socket")
        if any(not (port.socket and port.peer) for port in self.spec.lan_ports):
            raise ValueError("a LAN NIC on QEMU needs its two socket paths")


def _opt_value(value: Path | str) -> str:
    """Escape a value for QEMU's ``key=value,...`` option syntax (commas are doubled)."""
    return str(value).replace(",", ",,")


def _accel_args(config: MachineConfig) -> list[str]:
    args = ["-accel", config.accel]
    if config.cpu_model is not None:
        args += ["-cpu", config.cpu_model]
    return args


def _boot_args(config: MachineConfig) -> list[str]:
    args: list[str] = []
    if config.firmware is not None:
        args += ["-bios", str(config.firmware)]
    if config.uefi_code is not None and config.uefi_vars is not None:
        args += [
            "-drive",
            f"if=pflash,unit=0,format=raw,readonly=on,file={_opt_value(config.uefi_code)}",
            "-drive",
            f"if=pflash,unit=1,format=qcow2,file={_opt_value(config.uefi_vars)}",
            # OVMF's own network boot (its virtio-net driver, no option ROM) would
            # follow a failed disk boot for minutes: off.
            "-fw_cfg", "name=opt/org.tianocore/IPv4PXESupport,string=n",
            "-fw_cfg", "name=opt/org.tianocore/IPv6PXESupport,string=n",
        ]  # fmt: skip
    if config.spec.seed is not None:
        args += [
            "-drive",
            f"file={_opt_value(config.spec.seed)},format=raw,if=none,id=seed0,readonly=on,media=cdrom",
            "-device", "ide-cd,drive=seed0,bus=ide.1",
        ]  # fmt: skip
    if config.firmware_log is not None:
        args += [
            "-chardev", f"file,id=fwlog,path={_opt_value(config.firmware_log)}",
            "-device", "isa-debugcon,iobase=0x402,chardev=fwlog",
        ]  # fmt: skip
    if config.kernel is not None:
        args += ["-kernel", str(config.kernel)]
        if config.initrd is not None:
            args += ["-initrd", str(config.initrd)]
        if config.append is not None:
            args += ["-append", config.append]
    if config.disk is not None:
        args += [
            "-drive",
            f"file={_opt_value(config.disk)},format={config.disk_format},if=none,id=disk0,"
            "cache=unsafe",
            "-device",
            # A firmware boot tries the disk first, whatever else is attached (the seed).
            "virtio-blk-pci,drive=disk0" + (",bootindex=1" if config.kernel is None else ""),
        ]
    return args


def _share_args(config: MachineConfig) -> list[str]:
    """The share disks, after the system disk: PCI slots follow the command line, and the
    guest names virtio disks in slot order, so the system disk stays ``/dev/vda``."""
    args: list[str] = []
    for index, share in enumerate(config.spec.share_disks):
        args += [
            "-drive",
            f"file={_opt_value(share)},format=raw,if=none,id=share{index},readonly=on",
            "-device", f"virtio-blk-pci,drive=share{index},serial=adare-share{index}",
        ]  # fmt: skip
    return args


def _memory_args(config: MachineConfig) -> list[str]:
    """``-m``; with a writable share the RAM is a shared memfd as well, which virtiofsd
    maps to reach the guest's buffers (vhost-user needs it)."""
    args = ["-m", str(config.memory_mib)]
    if config.virtiofs_sockets:
        args += [
            "-object", f"memory-backend-memfd,id=ram0,size={config.memory_mib}M,share=on",
            "-numa", "node,memdev=ram0",
        ]  # fmt: skip
    return args


def _virtiofs_args(config: MachineConfig) -> list[str]:
    """A vhost-user-fs device per writable share, tagged :func:`shared_folder_tag`."""
    args: list[str] = []
    for index, path in enumerate(config.virtiofs_sockets):
        args += [
            "-chardev", f"socket,id=fs{index},path={_opt_value(path)}",
            "-device", f"vhost-user-fs-pci,chardev=fs{index},tag={shared_folder_tag(index)}",
        ]  # fmt: skip
    return args


def _serial_args(config: MachineConfig) -> list[str]:
    return [
        "-chardev", "stdio,id=console,signal=off",
        "-serial", "chardev:console",
        "-chardev",
        f"socket,id=agentser,path={_opt_value(config.agent_serial_path)},server=on,wait=off",
        *(["-serial", "chardev:agentser"] if config.spec.agent_link == "uart" else []),
    ]  # fmt: skip


def _qga_args(config: MachineConfig) -> list[str]:
    """The virtio-serial controller with its ports: QGA's, and the agent's link when
    ``agent_link`` is ``virtio``."""
    args: list[str] = []
    if config.qga_path is not None:
        args += [
            "-chardev", f"socket,id=qga,path={_opt_value(config.qga_path)},server=on,wait=off",
            "-device", f"virtserialport,bus=vser0.0,chardev=qga,name={QGA_PORT_NAME}",
        ]  # fmt: skip
    if config.spec.agent_link == "virtio":
        args += ["-device", f"virtserialport,bus=vser0.0,chardev=agentser,name={VIRTIO_PORT_NAME}"]
    return ["-device", "virtio-serial-pci,id=vser0", *args] if args else []


def _qmp_args(config: MachineConfig) -> list[str]:
    server = "server=on,wait=off" if config.qmp_listen else "server=off"
    return [
        "-chardev", f"socket,id=qmp,path={_opt_value(config.qmp_path)},{server}",
        "-mon", "chardev=qmp,mode=control",
    ]  # fmt: skip


def _display_args(config: MachineConfig) -> list[str]:
    if not config.display:
        return ["-display", "none"]
    return [
        "-vga", "std",
        "-display", "none",
        "-device", "qemu-xhci,id=usb0",
        "-device", "usb-tablet,bus=usb0.0",
    ]  # fmt: skip


def _network_args(config: MachineConfig) -> list[str]:
    if not config.spec.network:
        return ["-nic", "none"]
    return [
        "-netdev",
        f"user,id={NETDEV_ID},hostfwd=tcp:127.0.0.1:0-:{config.guest_agent_port}",
        "-device", f"virtio-net-pci,netdev={NETDEV_ID},addr={NIC_PCI_SLOT:#x},{NIC_PROPERTIES}",
    ]  # fmt: skip


def _lan_args(config: MachineConfig) -> list[str]:
    args: list[str] = []
    for port in config.spec.lan_ports:
        args += [
            "-netdev",
            f"dgram,id={port.netdev},local.type=unix,local.path={_opt_value(port.socket)},"
            f"remote.type=unix,remote.path={_opt_value(port.peer)}",
            "-device",
            f"virtio-net-pci,netdev={port.netdev},mac={port.mac},addr={port.slot:#x},"
            f"{NIC_PROPERTIES}",
        ]  # fmt: skip
    return args


def _rng_args(config: MachineConfig) -> list[str]:
    if not config.spec.rng:
        return []
    return [
        "-object", "rng-random,id=rng0,filename=/dev/urandom",
        "-device", "virtio-rng-pci,rng=rng0",
    ]  # fmt: skip


def _rtc_args(config: MachineConfig) -> list[str]:
    if config.spec.rtc_base is None:
        return []
    return ["-rtc", f"base={config.spec.rtc_base},clock=vm"]


def _fw_cfg_args(config: MachineConfig) -> list[str]:
    args: list[str] = []
    for name, path in sorted(config.spec.fw_cfg.items()):
        args += ["-fw_cfg", f"name={name},file={_opt_value(path)}"]
    return args


def build_qemu_argv(config: MachineConfig) -> list[str]:
    """The full QEMU argv (binary first) for ``config``; pure, touches no file."""
    return [
        config.qemu_binary,
        "-name", config.spec.name,
        "-machine", config.machine_type,
        *_accel_args(config),
        *_memory_args(config),
        "-smp", str(config.cpus),
        "-nodefaults",
        "-no-user-config",
        "-no-reboot",
        *_rtc_args(config),
        # The NIC first: its fixed PCI slot must be taken before QEMU numbers the others.
        *_network_args(config),
        *_lan_args(config),
        *_boot_args(config),
        *_share_args(config),
        *_virtiofs_args(config),
        *_serial_args(config),
        *_qga_args(config),
        *_qmp_args(config),
        *_display_args(config),
        *_rng_args(config),
        *_fw_cfg_args(config),
        *(["-incoming", "defer"] if config.spec.incoming else []),
        *config.extra_args,
    ]  # fmt: skip
