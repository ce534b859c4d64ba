"""How one VM is configured: the single frozen :class:`VMOptions` (a leaf module).

Each option is one field, and the field's :class:`OptionInfo` (its help, its parser and
where it is exposed: flag and ini key, ``adare_vm`` marker, ``launch()`` keyword) is all
there is to say about it: the plugin's flags and marker (``pytest_adare.plugin.options``),
``launch(**options)`` and the reference tables in docs/ are made from these fields, and
:meth:`VMOptions.from_given` holds the defaults that depend on other choices. Adding an
option is adding a field.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields
from datetime import datetime, timezone
from functools import cache
from typing import Any, Literal, TypedDict, get_args, get_origin, get_type_hints

from pytest_adare.host_access import (
    PortsInput,
    PortSpec,
    ShareInput,
    ShareSpec,
    parse_ports,
    parse_share,
)
from pytest_adare.lan.port import LanPort

Accel = Literal["auto", "kvm", "tcg"]
Transport = Literal["websocket", "serial"]
GuiMode = Literal["auto", "agent", "host"]
Install = Literal["auto", "qga"]
Warm = Literal["auto", "off"]
FirmwareChoice = Literal["auto", "bios", "uefi"]

ACCELS: tuple[Accel, ...] = get_args(Accel)
TRANSPORTS: tuple[Transport, ...] = get_args(Transport)
GUI_MODES: tuple[GuiMode, ...] = get_args(GuiMode)
INSTALLS: tuple[Install, ...] = get_args(Install)
WARM_MODES: tuple[Warm, ...] = get_args(Warm)
FIRMWARE_CHOICES: tuple[FirmwareChoice, ...] = get_args(FirmwareChoice)

READY_TAG = "adare-ready"
"""The internal snapshot holding a VM's ready state (``-loadvm adare-ready`` resumes it)."""
BOOT_TIMEOUT = 300.0
"""Bound on guest boot up to the agent's start (TCG on a busy 2-core host is slow)."""
DESKTOP_TIMEOUT = 120.0
"""Bound on a desktop guest's session getting a focused window after the agent connects."""
READY_TIMEOUT = 300.0
"""Bound on a user's readiness command exiting 0 (tried again every second until then)."""


def rtc_base(clock: str) -> str:
    """``2024-03-01T10:00:00+01:00`` → ``2024-03-01T09:00:00`` (UTC, whole seconds).

    :raise ValueError: not an ISO 8601 date or date-time, or before 1970.
    """
    try:
        moment = datetime.fromisoformat(clock.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"clock must be an ISO 8601 date-time like 2024-03-01T09:00:00Z, got {clock!r}"
        ) from None
    if moment.tzinfo is not None:
        moment = moment.astimezone(timezone.utc).replace(tzinfo=None)
    if moment.year < 1970:
        raise ValueError(f"clock must be 1970 or later, got {clock!r}")
    return moment.strftime("%Y-%m-%dT%H:%M:%S")


def ready_command_problem(command: object) -> str | None:
    """What is wrong with ``command`` as a readiness command (it must be a non-blank
    string without NUL), to follow the name of where it came from; None when nothing."""
    if not isinstance(command, str) or not command.strip() or "\0" in command:
        return f"must be a non-empty shell command, got {command!r}"
    return None


# -- parsers: a flag's or ini key's text, or a marker's value, to the field's value ----
# Each raises ValueError saying what was expected; the caller puts where it came from
# in front (``--adare-memory: ...``, ``adare_vm marker: memory: ...``).


def parse_memory(value: object) -> int:
    """MiB from ``1024``, ``512M``, ``512MiB``, ``2G`` or ``2GiB`` (or an int of MiB)."""
    if isinstance(value, int) and not isinstance(value, bool):
        number, unit = value, "M"
    else:
        match = re.fullmatch(r"\s*(\d+)\s*([MG])?(?:i?B)?\s*", str(value), re.IGNORECASE)
        if match is None:
            raise ValueError(f"expected a memory size in MiB like 1024, 512M or 2G, got {value!r}")
        number, unit = int(match.group(1)), (match.group(2) or "M").upper()
    mib = number * 1024 if unit == "G" else number
    if mib < 64:
        raise ValueError(f"{mib} MiB is too little memory for a guest (at least 64 MiB)")
    return mib


def parse_cpus(value: object) -> int:
    """A positive CPU count."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(f"expected a number of CPUs, got {value!r}")
    try:
        cpus = int(value)
    except ValueError:
        raise ValueError(f"expected a number of CPUs, got {value!r}") from None
    if cpus < 1:
        raise ValueError(f"expected at least 1 CPU, got {value!r}")
    return cpus


def parse_seconds(value: object) -> float:
    """A positive number of seconds (``90``, ``"2.5"``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"expected a number of seconds, got {value!r}")
    try:
        seconds = float(value)
    except ValueError:
        raise ValueError(f"expected a number of seconds, got {value!r}") from None
    if not seconds > 0:
        raise ValueError(f"expected a positive number of seconds, got {value!r}")
    return seconds


def parse_switch(value: object) -> bool:
    """True/False, or true/false, yes/no, on/off, 1/0 (any case) as text."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower() if isinstance(value, str) else ""
    if text in ("true", "yes", "on", "1"):
        return True
    if text in ("false", "no", "off", "0"):
        return False
    raise ValueError(f"expected true or false, got {value!r}")


def parse_ready_command(value: object) -> str:
    """A readiness command (see :func:`ready_command_problem`)."""
    if problem := ready_command_problem(value):
        raise ValueError(problem)
    return str(value)


def parse_clock(value: object) -> str:
    """An ISO 8601 date-time (checked by :func:`rtc_base`)."""
    if not isinstance(value, str):
        raise ValueError(f"expected an ISO 8601 string, got {value!r}")
    rtc_base(value)
    return value


def parse_uri(value: object) -> str:
    """A libvirt URI like ``qemu:///system``."""
    if not isinstance(value, str) or "://" not in value or any(c.isspace() for c in value):
        raise ValueError(f"expected a libvirt URI like qemu:///system, got {value!r}")
    return value


def parse_backend(value: object) -> str:
    """A backend's name (which ones exist, :mod:`pytest_adare.machine.registry` says)."""
    if not isinstance(value, str) or not re.fullmatch(r"[a-z][a-z0-9_-]{0,31}", value):
        raise ValueError(f"expected a backend name like qemu or libvirt, got {value!r}")
    return value


def parse_lan_ports(value: object) -> tuple[LanPort, ...]:
    """LAN NICs (set by ``adare_lan``, never given as text)."""
    if not isinstance(value, (tuple, list)) or not all(isinstance(p, LanPort) for p in value):
        raise ValueError(f"expected LAN ports (made by adare_lan), got {value!r}")
    return tuple(value)


def choice_parser(choices: tuple[str, ...]) -> Callable[[object], str]:
    """A parser accepting exactly one of ``choices``."""

    def parse(value: object) -> str:
        if value not in choices:
            raise ValueError(f"{value!r} is not one of {', '.join(choices)}")
        return str(value)

    return parse


# -- the metadata one option carries --------------------------------------------------

Exposure = Literal["cli", "marker", "launch"]
"""``cli``: a flag ``--adare-NAME`` and its ini twin ``adare_NAME``; ``marker``: an
``adare_vm(NAME=...)`` argument; ``launch``: a ``launch(field=...)`` keyword."""
EVERYWHERE: tuple[Exposure, ...] = ("cli", "marker", "launch")
OPTION_INFO = "adare"
"""The key of a field's :class:`OptionInfo` in its ``dataclasses.field`` metadata."""


@dataclass(frozen=True)
class OptionInfo:
    """What users see of one :class:`VMOptions` field.

    ``name`` is its name on the command line, in the ini file and in the marker
    (``memory`` for ``memory_mib``; default: the field's name); ``parse`` turns a flag's
    text or a marker's value into the field's value (default: the choices of a
    ``Literal`` field); ``doc_values`` and ``doc_default`` are the docs' table cells (markdown).
    """

    help: str
    exposed: tuple[Exposure, ...] = EVERYWHERE
    name: str | None = None
    parse: Callable[[object], Any] | None = None
    metavar: str = "VALUE"
    doc_values: str = ""
    doc_default: str = ""


def about(help: str, **info: Any) -> dict[str, OptionInfo]:
    """A :class:`VMOptions` field's metadata: its :class:`OptionInfo`."""
    return {OPTION_INFO: OptionInfo(help, **info)}


@dataclass(frozen=True)
class VMOptions:
    """Everything that configures one VM besides its image (hashable: equal options,
    same VM in the plugin's pool). Build one from what a user gave with
    :meth:`from_given`, which applies the defaults that follow other choices.

    :raise ValueError: naming the bad field and the allowed values.
    """

    memory_mib: int | None = field(
        default=None, metadata=about(
        "guest memory in MiB (flags and marker also take a unit: 512M, 2G) (default: "
        "the image's)",
        name="memory", parse=parse_memory, metavar="SIZE",
        doc_values="MiB: `1024`, `512M`, `2G`", doc_default="the image's",
    ))  # fmt: skip
    cpus: int | None = field(
        default=None, metadata=about(
        "number of guest CPUs (default: 1)", parse=parse_cpus, metavar="N",
        doc_values="a positive number", doc_default="`1`",
    ))  # fmt: skip
    accel: Accel = field(
        default="auto", metadata=about(
        "QEMU accelerator (default: auto = KVM when a short probe boot shows it "
        "works, else TCG; each VM's 'qemu:' line says which and why)",
        doc_default="`auto` (KVM when a short probe boot shows it works, else TCG; each VM's "
        "`qemu:` line says which and why)",
    ))  # fmt: skip
    transport: Transport = field(
        default="websocket", metadata=about(
        "agent link: websocket over QEMU user networking, or serial (the DV "
        "serial link; the VM gets no network card unless asked) (default: websocket; with "
        "a hypervisor: serial)",
        doc_default="`websocket`; with a hypervisor `serial`",
    ))  # fmt: skip
    network: bool = field(
        default=True, metadata=about(
        "give the VM a network card (default: yes, except with the serial transport)",
        exposed=("marker", "launch"), parse=parse_switch,
        doc_values="`True`, `False`", doc_default="`True`, except with the serial transport",
    ))  # fmt: skip
    rng: bool = field(
        default=False, metadata=about(
        "give the VM a virtio RNG fed from the host's /dev/urandom (/dev/hwrng in the "
        "guest: its kernel's entropy is ready at once) (default: no)",
        parse=parse_switch, metavar="BOOL",
        doc_values="`True`, `False`", doc_default="`False`",
    ))  # fmt: skip
    gui: GuiMode = field(
        default="auto", metadata=about(
        "where screenshots and GUI input go: auto = the in-guest agent on a desktop "
        "image whose agent can take a screenshot, else QEMU's screendump and input (each VM "
        "says which and why); agent; host (default: auto)",
        doc_values="`auto`, `agent`, `host` (marker: also `True`, needs a desktop)",
        doc_default="`auto`: the agent's screen on a desktop image whose agent can take a "
        "screenshot, else QEMU's ([gui](gui.md#which-screen-gui-auto))",
    ))  # fmt: skip
    install: Install = field(
        default="auto", metadata=about(
        "how the agent gets into the guest: auto = handed over at boot where the "
        "image allows, else over QGA; qga = always over QGA", exposed=(),
    ))  # fmt: skip
    boot_timeout: float = field(
        default=BOOT_TIMEOUT, metadata=about(
        "seconds the guest may take to boot up to the agent's start (default: "
        f"{BOOT_TIMEOUT:g})", parse=parse_seconds, metavar="SECONDS",
        doc_values="seconds", doc_default=f"`{BOOT_TIMEOUT:g}`",
    ))  # fmt: skip
    desktop_timeout: float = field(
        default=DESKTOP_TIMEOUT, metadata=about(
        "seconds a desktop image's session may take, after the agent connects, to give a "
        f"window the keyboard focus (default: {DESKTOP_TIMEOUT:g})",
        parse=parse_seconds, metavar="SECONDS",
        doc_values="seconds", doc_default=f"`{DESKTOP_TIMEOUT:g}`",
    ))  # fmt: skip
    firmware: FirmwareChoice = field(
        default="auto", metadata=about(
        "what boots a disk without a kernel of its own: auto = the manifest's, or "
        "for a bare disk what its partition table says (GPT with an EFI system partition: "
        "uefi) (default: auto)",
        doc_default="`auto`: the manifest's; for a bare disk its partition table decides "
        "([images](images.md#bring-your-own-image))",
    ))  # fmt: skip
    clock: str | None = field(
        default=None, metadata=about(
        "the guest's clock at boot, ISO 8601 (2024-03-01T09:00:00Z; no offset = UTC); "
        "it then runs on the VM's virtual clock (default: the host's time)",
        exposed=("marker", "launch"), parse=parse_clock,
        doc_values="ISO 8601: `2024-03-01T09:00:00Z`", doc_default="the host's time",
    ))  # fmt: skip
    warm: Warm = field(
        default="auto", metadata=about(
        "warm start: a VM loads the ready state the first cold boot of the same "
        "image, agent bundle, QEMU and machine saved in the cache (auto), or always boots "
        "(off); each VM says which and why (default: auto)",
        doc_default="`auto`: a VM loads the ready state the first cold boot of its combination "
        "saved in the cache ([runtime](runtime.md#warm-start))",
    ))  # fmt: skip
    backend: str = field(
        default="auto", metadata=about(
        "the machine backend: qemu (QEMU started here) or libvirt (a transient domain on "
        "the hypervisor hypervisor= names); auto = libvirt when a hypervisor is given, else "
        "qemu (default: auto)",
        parse=parse_backend, metavar="NAME",
        doc_values="`auto`, `qemu`, `libvirt` ([libvirt](libvirt.md))",
        doc_default="`auto`: `libvirt` with a hypervisor URI, else `qemu`",
    ))  # fmt: skip
    hypervisor: str | None = field(
        default=None, metadata=about(
        "a libvirt URI (qemu:///system, qemu+ssh://user@host/system): the guest runs "
        "as a transient domain there, reached over its serial channel (docs/libvirt.md)",
        exposed=("marker", "launch"), parse=parse_uri,
        doc_values="a libvirt URI", doc_default="none: QEMU started here",
    ))  # fmt: skip
    ready_command: str | None = field(
        default=None, metadata=about(
        "a guest shell command that exits 0 once the guest is ready for tests (e.g. "
        "'systemctl is-active my-app'): run after the agent connects, every second until "
        "it does (up to ready_timeout), before the ready state is saved; instead of "
        "waiting for systemd (default: the image manifest's ready_command, else systemd's "
        "own verdict)",
        parse=parse_ready_command, metavar="COMMAND", doc_values="a guest shell command",
        doc_default="none: the image manifest's `ready_command`, else systemd's own verdict "
        "([runtime](runtime.md#start-up-phases-vmphases-one-progress-line-each))",
    ))  # fmt: skip
    ready_timeout: float = field(
        default=READY_TIMEOUT, metadata=about(
        f"seconds the readiness command may take to exit 0 (default: "
        f"{READY_TIMEOUT:g})", exposed=("launch",), parse=parse_seconds,
        doc_values="seconds", doc_default=f"`{READY_TIMEOUT:g}`",
    ))  # fmt: skip
    lan_ports: tuple[LanPort, ...] = field(
        default=(), metadata=about(
        "NICs on LAN segments; set by adare_lan (docs/networks.md)", exposed=(),
        parse=parse_lan_ports,
    ))  # fmt: skip
    ports: tuple[PortSpec, ...] = field(
        default=(), metadata=about(
        "guest ports forwarded from the host's 127.0.0.1, each to a free host port "
        "(guest.port(80) says which): 80,5432/tcp,53/udp (default: none)",
        parse=parse_ports, metavar="PORTS",
        doc_values="a list: `[80, \"53/udp\"]`; flag: `80,53/udp`", doc_default="none",
    ))  # fmt: skip
    share: tuple[ShareSpec, ...] = field(
        default=(), metadata=about(
        "host folders mounted in the guest before the test: HOST:GUEST a read-only copy "
        "made at the VM's start, HOST:GUEST:rw the folder itself (virtiofs), several "
        "separated by commas; the VM then boots cold (default: none)",
        parse=parse_share, metavar="HOST:GUEST[:rw]",
        doc_values="`{\"./\": \"/src\"}`, `{\"./out\": \"/out:rw\"}`; flag: `HOST:GUEST[:rw]`",
        doc_default="none ([runtime](runtime.md#a-shared-folder))",
    ))  # fmt: skip

    def __post_init__(self) -> None:
        for spec in option_fields():
            value = getattr(self, spec.field)
            if spec.choices and value not in spec.choices:
                raise ValueError(f"{spec.field} must be one of {spec.choices}, got {value!r}")
        if self.clock is not None:
            rtc_base(self.clock)
        ready = self.ready_command
        if ready is not None and (problem := ready_command_problem(ready)):
            raise ValueError(f"ready_command {problem}")
        parse_backend(self.backend)
        if self.hypervisor is not None:
            parse_uri(self.hypervisor)
            if self.transport != "serial":
                raise ValueError(
                    "a libvirt hypervisor reaches the agent over its serial channel (no port "
                    "forwarding): use transport='serial'"
                )
        self._check_host_access()
        if self.transport == "websocket" and not self.network:
            raise ValueError("transport='websocket' needs the network; use transport='serial'")
        if self.memory_mib is not None and self.memory_mib < 64:
            raise ValueError(f"memory_mib must be at least 64, got {self.memory_mib}")
        if self.cpus is not None and self.cpus < 1:
            raise ValueError(f"cpus must be at least 1, got {self.cpus}")
        for name in ("boot_timeout", "desktop_timeout", "ready_timeout"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")

    def _check_host_access(self) -> None:
        """Forwarded ports need the user-mode NIC (whether the backend can forward them, or
        attach a share, :func:`~pytest_adare.machine.registry.backend_for` checks).
        ``launch(ports=[80])`` gives a list: kept as parsed tuples (the options are hashed)."""
        object.__setattr__(self, "ports", parse_ports(self.ports))
        object.__setattr__(self, "share", parse_share(self.share) if self.share else ())
        if self.ports and not self.network:
            raise ValueError(
                "ports: forwarded guest ports need the user-mode network card (network=True; "
                "on a LAN member: a LAN with internet=True)"
            )

    @classmethod
    def from_given(cls, given: Mapping[str, Any]) -> VMOptions:
        """The options from what a user gave (field names to values; what is missing
        takes its default). The defaults that follow other choices live here, once:
        with a hypervisor the transport is ``serial`` (libvirt forwards no port), and
        with the serial transport the VM has no network card unless ``network`` is given.

        :raise ValueError: an unknown field or a value it cannot take.
        """
        values = dict(given)
        unknown = sorted(set(values) - {f.name for f in fields(cls)})
        if unknown:
            raise ValueError(f"unknown VM option(s): {', '.join(unknown)}")
        if "transport" not in values:
            values["transport"] = "serial" if values.get("hypervisor") else "websocket"
        values.setdefault("network", values["transport"] != "serial")
        return cls(**values)

    @property
    def rtc_base(self) -> str | None:
        """:attr:`clock` as QEMU's ``-rtc base=`` value (UTC), or None."""
        return None if self.clock is None else rtc_base(self.clock)

    def describe(self) -> str:
        """Short text naming what differs from the defaults, e.g. ``transport=serial``."""
        parts = [f"accel={self.accel}", f"transport={self.transport}"]
        for spec in option_fields():
            value = getattr(self, spec.field)
            if spec.field in ("accel", "transport") or value == spec.default:
                continue
            if spec.field == "memory_mib":
                parts.append(f"memory={value}M")
            elif spec.field == "network":
                parts.append("no network" if not value else "network")
            elif spec.field in ("ports", "share"):
                parts.append(f"{spec.field}={','.join(map(str, value))}")
            elif spec.field == "lan_ports":
                parts.append(f"LAN NICs {','.join(port.netdev for port in value)}")
            elif isinstance(value, str) and spec.choices is None:
                parts.append(f"{spec.field}={value!r}" if " " in value else f"{spec.field}={value}")
            else:
                parts.append(f"{spec.field}={value}")
        return " ".join(parts)


@dataclass(frozen=True)
class OptionField:
    """One :class:`VMOptions` field with its :class:`OptionInfo`, resolved: its user-facing
    ``name``, default, choices (a ``Literal`` field's) and parser."""

    field: str
    name: str
    default: Any
    annotation: Any
    choices: tuple[str, ...] | None
    parse: Callable[[object], Any]
    info: OptionInfo

    def exposed(self, where: Exposure) -> bool:
        return where in self.info.exposed

    @property
    def values(self) -> str:
        """The docs' values cell: the info's, else the choices."""
        if self.info.doc_values:
            return self.info.doc_values
        return ", ".join(f"`{c}`" for c in self.choices or ())


@cache
def option_fields() -> tuple[OptionField, ...]:
    """Every :class:`VMOptions` field with its metadata, in definition order."""
    hints = get_type_hints(VMOptions)
    result = []
    for f in fields(VMOptions):
        info: OptionInfo = f.metadata[OPTION_INFO]
        hint = hints[f.name]
        choices = tuple(get_args(hint)) if get_origin(hint) is Literal else None
        parse = info.parse or (choice_parser(choices) if choices else None)
        if parse is None:
            raise TypeError(f"VMOptions.{f.name}: give its OptionInfo a parser")
        assert f.default is not MISSING
        result.append(
            OptionField(f.name, info.name or f.name, f.default, hint, choices, parse, info)
        )
    return tuple(result)


class LaunchOptions(TypedDict, total=False):
    """``launch()``'s VM keywords: the :class:`VMOptions` fields exposed to ``launch``
    (``tests/unit/pytest_adare/test_vm_options.py`` keeps the two equal, names and types)."""

    memory_mib: int | None
    cpus: int | None
    accel: Accel
    transport: Transport
    network: bool
    rng: bool
    gui: GuiMode
    boot_timeout: float
    desktop_timeout: float
    firmware: FirmwareChoice
    clock: str | None
    warm: Warm
    backend: str
    hypervisor: str | None
    ready_command: str | None
    ready_timeout: float
    ports: PortsInput
    share: ShareInput


LAUNCH_INPUT_TYPES: dict[str, object] = {"ports": PortsInput, "share": ShareInput}
"""The :class:`LaunchOptions` that take more than their field holds: what a user writes
(``ports=[80, "53/udp"]``, ``share={"./": "/src"}``), parsed into the field's tuple."""
