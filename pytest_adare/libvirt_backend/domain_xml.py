"""Pure builders of the XML the libvirt backend hands to libvirt, and the pool's names.

Like :mod:`pytest_adare.qemu.argv`, a domain is a pure function of one frozen,
validated :class:`DomainConfig`; variants come from :func:`dataclasses.replace`.

The fixed wiring (what the guest sees is what the QEMU backend gives it)::

    ttyS0   serial0   the console (the host reads it as a libvirt console stream)
    ttyS1   serial1   the agent's serial link when the image's agent serves /dev/ttyS1
    virtio  channel0  org.qemu.guest_agent.0 (QGA: libvirt connects to it itself and
                      runs our commands with virDomainQemuAgentCommand)
    virtio  channel1  the agent's link when the image's agent serves
                      /dev/virtio-ports/<name> (a unix channel: virDomainOpenChannel
                      opens only those)
    vda     the per-VM qcow2 overlay volume over the image's base volume
    vga + usb tablet  the screen (virDomainScreenshot) and absolute pointer
    LAN NICs  one ``<interface type='network'>`` per LAN port, on its isolated network,
              in the port's PCI slot (the guest finds it there), alias ``ua-lanN``

Every domain and volume carries our metadata (the owner's host and pid) so that
leftovers can be told from other users' domains.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal
from xml.sax.saxutils import escape, quoteattr

from pytest_adare.lan.port import LanPort

DomainType = Literal["qemu", "kvm"]
METADATA_NS = "https://pytest-adare.invalid/libvirt/1"
"""The XML namespace of our ``<metadata>`` element (a name, never fetched)."""
METADATA_PREFIX = "adare"
POOL_NAME = "adare"
"""The storage pool holding base volumes, boot files and per-VM overlays."""
VOLUME_PREFIX = "adare-"
QGA_CHANNEL = "org.qemu.guest_agent.0"
VIRTIO_PORTS = "/dev/virtio-ports/"
AGENT_ISA_SERIAL = "/dev/ttyS1"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_UPLOADER = re.compile(r"([0-9a-f]{8})-([0-9]{1,10})")
_CHANNEL_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")


@dataclass(frozen=True)
class AgentDevice:
    """Where the guest's agent serves its serial link, and the host's libvirt name for it.

    ``kind`` is ``serial`` (an ISA serial port: ``/dev/ttyS1``, libvirt alias ``serial1``,
    opened with ``virDomainOpenConsole``) or ``channel`` (a virtio-serial port
    ``/dev/virtio-ports/<name>``, alias ``channel1``, opened with ``virDomainOpenChannel``).
    """

    kind: Literal["serial", "channel"]
    name: str

    @property
    def alias(self) -> str:
        """The device alias libvirt gives it (what the stream is opened by)."""
        return "serial1" if self.kind == "serial" else "channel1"


def agent_device(serial_device: str | None) -> AgentDevice | None:
    """The libvirt device for the manifest's ``agent.serial_device`` (None: none).

    :raise ValueError: a device the libvirt backend cannot give the guest.
    """
    if not serial_device:
        return None
    if serial_device == AGENT_ISA_SERIAL:
        return AgentDevice("serial", "ttyS1")
    if serial_device.startswith(VIRTIO_PORTS):
        name = serial_device[len(VIRTIO_PORTS):]
        if _CHANNEL_NAME.fullmatch(name) and name != QGA_CHANNEL:
            return AgentDevice("channel", name)
    raise ValueError(
        f"the libvirt backend gives the agent {AGENT_ISA_SERIAL} or a virtio-serial port "
        f"{VIRTIO_PORTS}<name>; the image's agent serves {serial_device!r}"
    )


@dataclass(frozen=True)
class DomainConfig:
    """One transient domain; every path is a path on the hypervisor's host.

    :raise ValueError: naming the bad field.
    """

    name: str
    disk: str
    memory_mib: int
    cpus: int = 1
    domain_type: DomainType = "qemu"
    kernel: str | None = None
    initrd: str | None = None
    append: str | None = None
    agent: AgentDevice | None = None
    network: bool = False
    display: bool = True
    rtc_epoch: int | None = None
    """The guest clock at start, seconds since 1970 (None: the host's time)."""
    owner_host: str = ""
    owner_pid: int = 0
    channel_dir: str | None = None
    """Where the unix channels' sockets go (None: libvirt's own choice). A session
    daemon's choice, ``~/.config/libvirt/qemu/channel/target/domain-N-<name>/``, can
    pass the 108-byte limit of a socket path, so a session machine names a short one."""
    lan_ports: tuple[LanPort, ...] = ()
    """NICs on LAN segments: each names its libvirt network (``LanPort.network``)."""

    def __post_init__(self) -> None:
        for port in self.lan_ports:
            if not _NAME.fullmatch(port.network):
                raise ValueError(f"LAN NIC {port.netdev} names no libvirt network "
                                 f"({port.network!r})")  # fmt: skip
        if not _NAME.fullmatch(self.name):
            raise ValueError(f"domain name must match {_NAME.pattern}, got {self.name!r}")
        if self.domain_type not in ("qemu", "kvm"):
            raise ValueError(f"domain_type must be 'qemu' or 'kvm', got {self.domain_type!r}")
        if self.memory_mib < 64:
            raise ValueError(f"memory_mib must be at least 64, got {self.memory_mib}")
        if self.cpus < 1:
            raise ValueError(f"cpus must be at least 1, got {self.cpus}")
        if self.initrd is not None and self.kernel is None:
            raise ValueError("an initrd needs a kernel")
        if not self.disk.startswith("/"):
            raise ValueError(f"disk must be an absolute path on the hypervisor, got {self.disk!r}")
        if self.channel_dir is not None:
            targets = [QGA_CHANNEL]
            if self.agent is not None and self.agent.kind == "channel":
                targets.append(self.agent.name)
            longest = max(len(_channel_path(self.channel_dir, t).encode()) for t in targets)
            if not self.channel_dir.startswith("/") or longest > MAX_SOCKET_PATH:
                raise ValueError(
                    f"channel_dir must be an absolute path leaving its sockets within "
                    f"{MAX_SOCKET_PATH} bytes, got {self.channel_dir!r} ({longest} bytes)"
                )


# sun_path is 108 bytes including the terminating NUL.
MAX_SOCKET_PATH = 107


def _channel_path(channel_dir: str, target: str) -> str:
    return f"{channel_dir.rstrip('/')}/{target}.sock"


def _channel_source(config: DomainConfig, target: str) -> str:
    if config.channel_dir is None:
        return "<source mode='bind'/>"
    return f"<source mode='bind' path={quoteattr(_channel_path(config.channel_dir, target))}/>"


def build_domain_xml(config: DomainConfig) -> str:
    """The ``<domain>`` XML for ``virDomainCreateXML`` (transient; never defined)."""
    clock = (
        "<clock offset='utc'/>"
        if config.rtc_epoch is None
        else f"<clock offset='absolute' start='{int(config.rtc_epoch)}'/>"
    )
    return "\n".join(
        [
            f"<domain type='{config.domain_type}'>",
            f"  <name>{escape(config.name)}</name>",
            "  <metadata>",
            f"    <{METADATA_PREFIX}:vm xmlns:{METADATA_PREFIX}='{METADATA_NS}'"
            f" host={quoteattr(config.owner_host)} pid='{int(config.owner_pid)}'/>",
            "  </metadata>",
            f"  <memory unit='MiB'>{config.memory_mib}</memory>",
            f"  <vcpu>{config.cpus}</vcpu>",
            *_os_xml(config),
            "  <features><acpi/></features>",
            *(["  <cpu mode='host-passthrough'/>"] if config.domain_type == "kvm" else []),
            f"  {clock}",
            # A guest reboot or crash must end the domain, like QEMU's -no-reboot.
            "  <on_poweroff>destroy</on_poweroff>",
            "  <on_reboot>destroy</on_reboot>",
            "  <on_crash>destroy</on_crash>",
            "  <devices>",
            *_devices_xml(config),
            "  </devices>",
            "</domain>",
        ]
    )


def _os_xml(config: DomainConfig) -> list[str]:
    lines = ["  <os>", "    <type arch='x86_64' machine='pc'>hvm</type>"]
    if config.kernel is not None:
        lines.append(f"    <kernel>{escape(config.kernel)}</kernel>")
        if config.initrd is not None:
            lines.append(f"    <initrd>{escape(config.initrd)}</initrd>")
        lines.append(f"    <cmdline>{escape(with_panic_exit(config.append))}</cmdline>")
    else:
        lines.append("    <boot dev='hd'/>")
    lines.append("  </os>")
    return lines


def _devices_xml(config: DomainConfig) -> list[str]:
    lines = [
        "    <disk type='file' device='disk'>",
        "      <driver name='qemu' type='qcow2'/>",
        f"      <source file={quoteattr(config.disk)}/>",
        "      <target dev='vda' bus='virtio'/>",
        "    </disk>",
        "    <serial type='pty'><target port='0'/></serial>",
    ]
    if config.agent is not None and config.agent.kind == "serial":
        lines.append("    <serial type='pty'><target port='1'/></serial>")
    lines += [
        "    <console type='pty'><target type='serial' port='0'/></console>",
        f"    <channel type='unix'>{_channel_source(config, QGA_CHANNEL)}"
        f"<target type='virtio' name='{QGA_CHANNEL}'/></channel>",
    ]
    if config.agent is not None and config.agent.kind == "channel":
        lines.append(
            f"    <channel type='unix'>{_channel_source(config, config.agent.name)}"
            f"<target type='virtio' name='{config.agent.name}'/></channel>"
        )
    if config.network:
        lines.append("    <interface type='user'><model type='virtio'/></interface>")
    lines += [f"    {lan_interface_xml(port)}" for port in config.lan_ports]
    if config.display:
        lines += [
            "    <input type='tablet' bus='usb'/>",
            "    <graphics type='vnc' autoport='yes' listen='127.0.0.1'/>",
            "    <video><model type='vga'/></video>",
        ]
    else:
        lines.append("    <video><model type='none'/></video>")
    lines.append("    <memballoon model='none'/>")
    return lines


def lan_interface_xml(port: LanPort, *, link_up: bool | None = None) -> str:
    """The ``<interface>`` of one LAN NIC; with ``link_up`` also its link state (what
    ``virDomainUpdateDeviceFlags`` takes to cut or restore the link, as
    ``virsh domif-setlink`` does: libvirt finds the NIC by its MAC)."""
    link = "" if link_up is None else f"<link state='{'up' if link_up else 'down'}'/>"
    return (
        f"<interface type='network'><source network={quoteattr(port.network)}/>"
        f"<mac address='{port.mac}'/><model type='virtio'/>{link}"
        f"<alias name='ua-{port.netdev}'/>"
        f"<address type='pci' domain='0x0000' bus='0x00' slot='{port.slot:#04x}' "
        "function='0x0'/></interface>"
    )


def build_network_xml(name: str) -> str:
    """An isolated network for one LAN segment: a bridge on the hypervisor's host with
    no ``<forward>`` (no route out), no ``<ip>`` (no host address, no DHCP or DNS
    server: the members' addresses are set through their agents), no STP and no
    forwarding delay (a member's link works as soon as it is up).

    :raise ValueError: ``name`` is no libvirt object name.
    """
    if not _NAME.fullmatch(name):
        raise ValueError(f"network name must match {_NAME.pattern}, got {name!r}")
    return f"<network><name>{escape(name)}</name><bridge stp='off' delay='0'/></network>"


def with_panic_exit(append: str | None) -> str:
    """``append`` plus ``panic=-1``: a panicking kernel reboots, which ends the domain."""
    words = (append or "").split()
    if any(word.startswith("panic=") for word in words):
        return " ".join(words)
    return " ".join([*words, "panic=-1"])


# -- the storage pool -------------------------------------------------------------------


def build_pool_xml(path: str) -> str:
    """A directory pool named :data:`POOL_NAME` at ``path`` (on the hypervisor)."""
    return (
        f"<pool type='dir'><name>{POOL_NAME}</name>"
        f"<target><path>{escape(path)}</path></target></pool>"
    )


def base_volume_name(kind: Literal["disk", "kernel", "initrd"], sha256: str) -> str:
    """The content-addressed name of an image file in the pool, e.g.
    ``adare-disk-5bc45d8e….img``: equal bytes, one volume, reused by later runs.

    :raise ValueError: ``sha256`` is not 64 lower-case hex digits.
    """
    if not _SHA256.fullmatch(sha256):
        raise ValueError(f"expected a sha256 in lower-case hex, got {sha256!r}")
    return f"{VOLUME_PREFIX}{kind}-{sha256}.img"


def done_marker_name(volume: str) -> str:
    """The empty volume created after ``volume``'s upload completed (uploads are not
    atomic: a base volume without it is a torn upload)."""
    return f"{volume}.done"


def uploader_marker_name(volume: str, host: str, pid: int) -> str:
    """The empty volume naming who is uploading ``volume`` (host tag and process id)."""
    return f"{volume}.uploader-{host}-{int(pid)}"


def uploader_of(marker: str, volume: str) -> Uploader | None:
    """Who :func:`uploader_marker_name` says uploads ``volume``; None for other names."""
    prefix = f"{volume}.uploader-"
    if not marker.startswith(prefix):
        return None
    match = _UPLOADER.fullmatch(marker[len(prefix):])
    if match is None:
        return None
    return Uploader(match.group(1), int(match.group(2)))


@dataclass(frozen=True)
class Uploader:
    """The host tag and process id of a base volume's uploader."""

    host: str
    pid: int


def vm_volume_name(domain: str, what: Literal["overlay", "initrd"]) -> str:
    """A per-VM volume, e.g. ``adare-vm-…-overlay.qcow2``; removed with the VM."""
    suffix = "qcow2" if what == "overlay" else "img"
    return f"{domain}-{what}.{suffix}"


def is_our_volume(name: str) -> bool:
    """Volumes this backend created (the reaper looks at no others)."""
    return name.startswith(VOLUME_PREFIX)


def build_raw_volume_xml(name: str, size: int) -> str:
    """A raw volume of ``size`` bytes, to be filled by ``virStorageVolUpload``."""
    return (
        f"<volume><name>{escape(name)}</name><capacity unit='B'>{int(size)}</capacity>"
        f"<allocation unit='B'>0</allocation><target><format type='raw'/></target></volume>"
    )


def build_overlay_volume_xml(name: str, backing: str, backing_format: str, size: int) -> str:
    """A qcow2 volume of ``size`` virtual bytes over the volume at path ``backing``."""
    return (
        f"<volume><name>{escape(name)}</name><capacity unit='B'>{int(size)}</capacity>"
        "<target><format type='qcow2'/></target>"
        f"<backingStore><path>{escape(backing)}</path>"
        f"<format type='{escape(backing_format)}'/></backingStore></volume>"
    )


def build_snapshot_xml(tag: str) -> str:
    """An internal snapshot of the running domain: RAM, devices and the qcow2 disk."""
    return (
        f"<domainsnapshot><name>{escape(tag)}</name>"
        "<memory snapshot='internal'/>"
        "<disks><disk name='vda' snapshot='internal'/></disks></domainsnapshot>"
    )
