"""What a VM asks of its machine, whatever the backend: the one frozen :class:`MachineSpec`.

The VM builds it once per start from its options (:func:`spec_from_options`: every spec
field named like a :class:`~pytest_adare.vm_options.VMOptions` field takes that option's
value) and the start's own inputs (boot hand-off files, a seed, share disks, an incoming
state); every backend's factory takes it whole (``factory(image, workdir, spec)``), so the
parameter list lives here only.

Each field says how it meets a saved ready state (a warm start), in its metadata
(:func:`part`):

- ``saved``: the saved devices depend on it, so it is part of the warm key
  (:meth:`MachineSpec.state_parts`); a field added with this role is in the key without
  another line anywhere (``tests/unit/pytest_adare/machine/test_spec.py`` changes each
  one and checks that the key follows).
- ``cold``: only a cold boot can have it; away from its default the VM boots cold, and
  the reason names it (:meth:`MachineSpec.cold_reasons`).
- ``start``: set anew at every start (the VM's name, the accelerator asked for, whose
  choice the key holds, the boot inputs saved beside the state, ``incoming``).

Each field also names itself for messages (``a scenario clock``): a backend lists the
fields it can honour, and any other field away from its default is refused with the one
:func:`~pytest_adare.machine.base.unsupported` message (:meth:`MachineSpec.unsupported_by`),
so a new field is refused by a backend that never heard of it instead of being dropped.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from functools import cache
from pathlib import Path
from typing import Any, Literal

from pytest_adare.host_access import ShareSpec, writable_shares
from pytest_adare.lan.port import LanPort
from pytest_adare.vm_options import Accel, VMOptions

StateRole = Literal["saved", "cold", "start"]
AgentLink = Literal["uart", "virtio"]
AccelRequest = Accel
"""What a VM may ask for (the option's own choices); the warm key holds what was chosen."""
SPEC_PART = "machine"
"""The key of a field's :class:`SpecPart` in its ``dataclasses.field`` metadata."""

NIC_PROPERTIES = "romfile=,guest_announce=off"
"""Every NIC's device properties beyond its netdev, MAC and slot (the user NIC's and a LAN
NIC's). No guest announce, for two reasons. On a LAN: after a saved state loads, QEMU would
have the guest send gratuitous ARPs, neighbour advertisements and multicast reports for the
address and MAC it had when the state was saved, onto a segment where the scenario alone
should speak. On every NIC: a load runs with ``announce-rounds=0`` (``qemu/migration.py``),
and QEMU 7.2's virtio-net then frees a guest-announcing NIC's announce timer after the load
and dereferences it at the next reset, so the first ``loadvm`` of a per-test restore
crashed QEMU (SIGSEGV in ``timer_del`` under ``virtio_net_reset``). The warm key holds this
string (with the NICs): a saved state's features must match the devices loading it."""

_RTC_BASE = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}")


@dataclass(frozen=True)
class SpecPart:
    """How one :class:`MachineSpec` field meets a saved state (``role``), what it is called
    in messages (``what``), and for a ``saved`` field how the key spells it (``key``:
    default ``str``); for a ``cold`` field, why a saved state cannot have it (``why``)."""

    role: StateRole
    what: str
    key: Callable[[Any], str] | None = None
    why: str = ""


def part(role: StateRole, what: str, **more: Any) -> dict[str, SpecPart]:
    """A :class:`MachineSpec` field's metadata: its :class:`SpecPart`."""
    return {SPEC_PART: SpecPart(role, what, **more)}


def _lan_key(ports: tuple[LanPort, ...]) -> str:
    # The NICs are in the saved devices; their sockets, MACs and addresses are not (set at
    # each start), so LAN members share a state with each other only.
    if not ports:
        return ""
    return ",".join(f"{p.netdev}@{p.slot:#x}" for p in ports) + f";{NIC_PROPERTIES}"


def _network_key(network: bool) -> str:
    # The NIC's properties decide the saved virtio features (a mismatch fails the load).
    return f"{network};{NIC_PROPERTIES}"


@dataclass(frozen=True)
class MachineSpec:
    """One machine's configuration, as every backend receives it (see the module)."""

    name: str = field(default="vm", metadata=part("start", "the machine's name"))
    memory_mib: int | None = field(
        default=None, metadata=part("saved", "the memory size", key=lambda v: str(v or ""))
    )
    """MiB; None: the image's, else 1024 (the key holds what the VM asked for and the
    image's, :func:`spec_from_options` resolves it)."""
    cpus: int = field(default=1, metadata=part("saved", "the CPU count"))
    accel: AccelRequest = field(default="auto", metadata=part("start", "the accelerator"))
    """What was asked for; the warm key holds what was chosen (the accelerator probe's)."""
    network: bool = field(
        default=True, metadata=part("saved", "the user-mode network card", key=_network_key)
    )
    rng: bool = field(default=False, metadata=part("saved", "a virtio RNG"))
    """A ``virtio-rng-pci`` device fed from the host's ``/dev/urandom``."""
    agent_link: AgentLink = field(
        default="uart", metadata=part("saved", "the agent's serial link on virtio-serial")
    )
    """What carries the agent's serial link: the UART ``ttyS1`` or a virtio-serial port."""
    lan_ports: tuple[LanPort, ...] = field(
        default=(), metadata=part("saved", "the NICs on LAN segments", key=_lan_key)
    )
    fw_cfg: Mapping[str, Path] = field(
        default_factory=dict, metadata=part("start", "fw_cfg hand-off")
    )
    """Files handed to the guest through fw_cfg (the agent's hand-off); a warm start passes
    the very files the state was saved with (their sizes are in the state)."""
    firmware: str = field(
        default="bios", metadata=part("cold", "UEFI firmware", why="a firmware-booted disk")
    )
    """``bios`` or ``uefi``: what boots a disk without a kernel (warm start needs a kernel
    anyway)."""
    seed: Path | None = field(
        default=None,
        metadata=part("cold", "a cloud-init seed", why="a cloud-init seed (read at first boot)"),
    )
    rtc_base: str | None = field(
        default=None,
        metadata=part(
            "cold", "a scenario clock", why="a scenario clock (the saved guest clock would not "
            "match it)",
        ),
    )  # fmt: skip
    """The guest's real-time clock at power-on, ``YYYY-MM-DDTHH:MM:SS`` in UTC."""
    share_disks: tuple[Path, ...] = field(
        default=(),
        metadata=part(
            "cold", "a shared folder", why="a shared folder (its disk is attached at boot; a "
            "saved state has none)",
        ),
    )  # fmt: skip
    """Read-only disks of shared host folders (:mod:`pytest_adare.machine_tools.share`)."""
    shared_folders: tuple[ShareSpec, ...] = field(
        default=(),
        metadata=part(
            "cold", "a writable shared folder", why="a writable shared folder (a virtiofs "
            "device, which QEMU cannot save)",
        ),
    )  # fmt: skip
    """Writable shares, the host folder itself over virtiofs
    (:mod:`pytest_adare.qemu.virtiofs`); the guest mounts each by its
    :func:`shared_folder_tag`."""
    incoming: bool = field(
        default=False, metadata=part("start", "loading a saved state (warm start)")
    )
    """Started to receive a saved state, not to boot."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "lan_ports", tuple(self.lan_ports))
        object.__setattr__(self, "share_disks", tuple(Path(p) for p in self.share_disks))
        object.__setattr__(self, "shared_folders", tuple(self.shared_folders))
        object.__setattr__(self, "fw_cfg", dict(self.fw_cfg))
        if self.memory_mib is not None and self.memory_mib < 64:
            raise ValueError(f"memory_mib must be at least 64, got {self.memory_mib}")
        if self.cpus < 1:
            raise ValueError(f"cpus must be at least 1, got {self.cpus}")
        if self.firmware not in ("bios", "uefi"):
            raise ValueError(f"firmware must be 'bios' or 'uefi', got {self.firmware!r}")
        if self.rtc_base is not None and not _RTC_BASE.fullmatch(self.rtc_base):
            raise ValueError(f"rtc_base must be YYYY-MM-DDTHH:MM:SS (UTC), got {self.rtc_base!r}")
        if len({port.netdev for port in self.lan_ports}) != len(self.lan_ports):
            raise ValueError("two LAN NICs with the same netdev id")
        for name in self.fw_cfg:
            if not name.startswith("opt/") or "," in name:
                raise ValueError(f"fw_cfg names must start with 'opt/' and hold no comma: {name!r}")

    def __hash__(self) -> int:  # fw_cfg is a dict: hash what identifies the machine
        return hash((self.name, self.state_parts(), self.incoming))

    def memory_for(self, image_memory_mib: int | None) -> int:
        """The memory a machine of an image asking ``image_memory_mib`` gets."""
        return self.memory_mib or image_memory_mib or 1024

    def state_parts(self) -> tuple[tuple[str, str], ...]:
        """The ``saved`` fields as the warm key spells them, in definition order."""
        return tuple(
            (f.name, (info.key or str)(getattr(self, f.name)))
            for f, info in spec_parts()
            if info.role == "saved"
        )

    def cold_reasons(self) -> list[str]:
        """Why a saved state cannot start this machine: one per ``cold`` field away
        from its default (empty: a warm start is possible as far as the machine goes)."""
        return [info.why or info.what for f, info in spec_parts()
                if info.role == "cold" and not _is_default(self, f.name)]  # fmt: skip

    def unsupported_by(self, supported: frozenset[str]) -> list[str]:
        """What this spec asks that a backend honouring only ``supported`` fields cannot do:
        the ``what`` of every other field away from its default."""
        return [info.what for f, info in spec_parts()
                if f.name not in supported and not _is_default(self, f.name)]  # fmt: skip


_DEFAULTS = MachineSpec()


def _is_default(spec: MachineSpec, name: str) -> bool:
    return bool(getattr(spec, name) == getattr(_DEFAULTS, name))


@cache
def spec_parts() -> tuple[tuple[Any, SpecPart], ...]:
    """Every :class:`MachineSpec` field with its :class:`SpecPart`.

    :raise TypeError: a field without one (each must say how it meets a saved state)."""
    result = []
    for f in fields(MachineSpec):
        info = f.metadata.get(SPEC_PART)
        if not isinstance(info, SpecPart):
            raise TypeError(f"MachineSpec.{f.name}: give it part(role, what)")
        result.append((f, info))
    return tuple(result)


def shared_folder_tag(index: int) -> str:
    """The virtiofs tag of ``shared_folders[index]``: the guest mounts it by this name."""
    return f"adare-fs{index}"


_RESOLVED_BY_THE_VM = {"firmware"}
"""Options named like a spec field whose value the VM resolves first (``firmware="auto"``:
the manifest's, or what a bare disk's partition table says) and passes as a start input."""


def spec_from_options(options: VMOptions, **start: Any) -> MachineSpec:
    """The spec of a VM with ``options``: each spec field named like an option takes the
    option's value (``memory_mib``, ``cpus``, ``accel``, ``network``, ``lan_ports``; a new
    machine option needs no line here), ``rtc_base`` the option clock's,
    ``shared_folders`` the writable shares of ``share``, and ``start`` the
    start's own inputs (``name``, ``agent_link``, ``fw_cfg``, ``firmware``, ``seed``,
    ``share_disks``, ``incoming``)."""
    option_names = {f.name for f in fields(VMOptions)} - _RESOLVED_BY_THE_VM
    values: dict[str, Any] = {
        f.name: getattr(options, f.name)
        for f, _ in spec_parts()
        if f.name in option_names and getattr(options, f.name) is not None
    }
    if options.rtc_base is not None:
        values["rtc_base"] = options.rtc_base
    writable = writable_shares(options.share)
    if writable:
        values["shared_folders"] = writable
    values.update(start)
    return MachineSpec(**values)
