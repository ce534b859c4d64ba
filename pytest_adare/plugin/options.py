"""The plugin's options: command line flags, their ini twins, and the ``adare_vm`` marker.

Every option exists twice, as ``--adare-NAME`` and as the ini key ``adare_NAME``; the
command line wins. :func:`read_options` turns both into one validated
:class:`AdareOptions`; :func:`apply_marker` lays a test's ``adare_vm(...)`` marker on top
and returns what that test needs (:class:`VMRequest`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

from pytest_adare.plugin.hypervisors import (
    assign_hypervisor,
    parse_hypervisors,
    parse_limit,
    worker_of,
)
from pytest_adare.vm_options import (
    ACCELS,
    FIRMWARE_CHOICES,
    GUI_MODES,
    TRANSPORTS,
    WARM_MODES,
    VMOptions,
    ready_command_problem,
)

C = TypeVar("C", bound=str)

ISOLATIONS = ("snapshot", "none", "reboot")
KEEP_MODES = ("never", "on-failure", "always")
EVIDENCE_MODES = ("off", "on-failure", "always")
RECORD_MODES = ("off", "on-failure", "always")
OS_NAMES = ("linux", "windows")


@dataclass(frozen=True)
class OptionSpec:
    """One option: its flag, ini key, allowed values and help text."""

    name: str
    help: str
    choices: tuple[str, ...] | None = None
    default: str | None = None
    metavar: str = "VALUE"
    switch: bool = False
    """A flag without a value (``--adare-pcap``); its ini twin takes true/false."""

    @property
    def flag(self) -> str:
        return "--adare-" + self.name.replace("_", "-")

    @property
    def ini(self) -> str:
        return "adare_" + self.name


OPTION_SPECS: tuple[OptionSpec, ...] = (
    OptionSpec(
        "vm",
        "guest image: an adare-image.json manifest, its directory, a disk image, or a built-in "
        "name (debian, debian-desktop; built on first use and cached). Without it, tests "
        "that need a VM are skipped.",
        metavar="IMAGE",
    ),
    OptionSpec(
        "accel", "QEMU accelerator (default: auto = KVM when usable, else TCG)", ACCELS, "auto"
    ),
    OptionSpec(
        "firmware",
        "what boots a disk without a kernel of its own: auto = the manifest's, or for a bare "
        "disk what its partition table says (GPT with an EFI system partition: uefi) "
        "(default: auto)",
        FIRMWARE_CHOICES,
        "auto",
    ),
    OptionSpec(
        "memory",
        "guest memory in MiB, or with a unit: 512M, 2G (default: the image's)",
        metavar="SIZE",
    ),
    OptionSpec("cpus", "number of guest CPUs (default: the image's)", metavar="N"),
    OptionSpec(
        "isolation",
        "clean state per test: snapshot restores the saved ready state, "
        "reboot restarts the VM, none reuses it as the last test left it "
        "(default: snapshot)",
        ISOLATIONS,
        "snapshot",
    ),
    OptionSpec(
        "transport",
        "agent link: websocket over QEMU user networking, or serial "
        "(the DV serial link; the VM gets no network card) (default: websocket)",
        TRANSPORTS,
        "websocket",
    ),
    OptionSpec(
        "gui",
        "where screenshots and GUI input go: auto = the in-guest agent on a desktop image "
        "whose agent can take a screenshot, else QEMU's screendump and input (each VM "
        "says which and why); agent; host (default: auto)",
        GUI_MODES,
        "auto",
    ),
    OptionSpec(
        "artifacts",
        "directory for failure evidence, one sub-directory per test "
        "(default: adare-artifacts under pytest's base temp dir)",
        metavar="DIR",
    ),
    OptionSpec(
        "pcap",
        "capture each test's guest network traffic (its call phase) as network.pcap in "
        "its artifacts (ini: true/false)",
        switch=True,
    ),
    OptionSpec(
        "evidence",
        "collect a hypervisor evidence bundle per test (RAM as ELF, raw disk, the pcap of a "
        "running capture, manifest.json with sha256s and CASE JSON-LD) into its artifacts "
        "(default: off)",
        EVIDENCE_MODES,
        "off",
    ),
    OptionSpec(
        "record",
        "film each test's screen: the host keeps the last 20 s of QMP screendumps at 2 fps "
        "and writes recording.webp into the artifacts of a failing test (always: of every "
        "test) (default: on-failure)",
        RECORD_MODES,
        "on-failure",
    ),
    OptionSpec(
        "warm",
        "warm start: a VM loads the ready state the first cold boot of the same image, "
        "agent bundle, QEMU and machine saved in the cache (auto), or always boots (off); "
        "each VM says which and why (default: auto)",
        WARM_MODES,
        "auto",
    ),
    OptionSpec(
        "ready_command",
        "a guest shell command that exits 0 once the guest is ready for tests (e.g. "
        "'systemctl is-active my-app'): run after the agent connects, every second until it "
        "does (up to 300 s), before the ready state is saved; instead of waiting for systemd "
        "(default: the image manifest's ready_command, else systemd's own verdict)",
        metavar="COMMAND",
    ),
    OptionSpec(
        "hypervisor",
        "run the guests as transient domains on this libvirt hypervisor (qemu:///system, "
        "qemu+ssh://user@host/system; the agent over its serial channel) instead of a QEMU "
        "started here; several as URI1,URI2 or @FILE (one per line): -n workers spread "
        "over them, each on one (default: none; docs/libvirt.md)",
        metavar="URI",
    ),
    OptionSpec(
        "hypervisor_limit",
        "the most VMs (xdist workers) one hypervisor takes; -n beyond hypervisors x limit "
        "is an error (default: no limit)",
        metavar="N",
    ),
    OptionSpec(
        "keep",
        "keep a VM's disk overlay for a look afterwards (default: never)",
        KEEP_MODES,
        "never",
    ),
)


MARKER_DOC = (
    "adare_vm(image=None, gui=None, os=None, memory=None, cpus=None, accel=None, "
    "isolation=None, transport=None, network=None, firmware=None): the VM this test's guest "
    "runs on. image/memory/cpus/accel/transport/network/firmware override the --adare-* "
    "options (a test whose VM differs from the session VM gets its own VM, shared with "
    "tests asking for the same); isolation overrides --adare-isolation for this test; gui=True (or "
    "'auto'/'agent'/'host') needs an image with a desktop; os='linux'|'windows' needs that guest "
    "OS; clock='2024-03-01T09:00:00Z' boots the guest with its clock there (its own VM); "
    "warm='off' boots it cold; hypervisor='qemu:///system' runs it on that libvirt host; "
    "ready_command='...' is the guest command that says the VM is ready (its own VM). "
    "Unmet needs skip the test with the reason."
)

MARKER_KEYS = (
    "image",
    "gui",
    "os",
    "memory",
    "cpus",
    "accel",
    "isolation",
    "transport",
    "network",
    "clock",
    "warm",
    "firmware",
    "hypervisor",
    "ready_command",
)


@dataclass(frozen=True)
class AdareOptions:
    """The session's options after merging command line and ini (command line wins)."""

    vm: str | None = None
    accel: str = "auto"
    firmware: str = "auto"
    memory_mib: int | None = None
    cpus: int | None = None
    isolation: str = "snapshot"
    transport: str = "websocket"
    gui: str = "auto"
    artifacts: Path | None = None
    keep: str = "never"
    pcap: bool = False
    evidence: str = "off"
    record: str = "on-failure"
    warm: str = "auto"
    ready_command: str | None = None
    hypervisor: str | None = None
    """The hypervisor this process's VMs run on (one of ``hypervisors``)."""
    hypervisors: tuple[str, ...] = ()
    hypervisor_limit: int | None = None


@dataclass(frozen=True)
class VMRequest:
    """What one test asks for: the image and VM options, plus its needs and isolation.

    ``vm_key`` identifies the VM configuration: tests with equal keys share a VM.
    """

    image: str
    options: VMOptions
    isolation: str
    needs_desktop: bool = False
    needs_os: str | None = None

    @property
    def vm_key(self) -> tuple[str, VMOptions]:
        return (self.image, self.options)

    def describe(self) -> str:
        """Short text naming the VM configuration, for progress lines and errors."""
        return f"{self.image} {self.options.describe()}"


def register_options(parser: pytest.Parser) -> None:
    """Add every ``--adare-*`` flag and its ``adare_*`` ini twin."""
    group = parser.getgroup("adare", "pytest-adare: QEMU guest VMs as fixtures")
    for spec in OPTION_SPECS:
        choices = f" ({'|'.join(spec.choices)})" if spec.choices else ""
        if spec.switch:
            group.addoption(
                spec.flag, dest=spec.ini, action="store_const", const="true", default=None,
                help=spec.help,
            )  # fmt: skip
        else:
            group.addoption(
                spec.flag, dest=spec.ini, default=None, metavar=spec.metavar,
                help=spec.help + choices,
            )  # fmt: skip
        parser.addini(
            spec.ini, f"{spec.flag} as an ini key: {spec.help}", type="string", default=""
        )


def parse_memory(value: str | int, source: str) -> int:
    """A memory size in MiB from ``1024``, ``512M``, ``512MiB``, ``2G`` or ``2GiB``.

    :raise pytest.UsageError: for anything else, naming ``source``.
    """
    if isinstance(value, int) and not isinstance(value, bool):
        number, unit = value, "M"
    else:
        match = re.fullmatch(r"\s*(\d+)\s*([MG])?(?:i?B)?\s*", str(value), re.IGNORECASE)
        if match is None:
            raise pytest.UsageError(
                f"{source}: expected a memory size in MiB like 1024, 512M or 2G, got {value!r}"
            )
        number, unit = int(match.group(1)), (match.group(2) or "M").upper()
    mib = number * 1024 if unit == "G" else number
    if mib < 64:
        raise pytest.UsageError(
            f"{source}: {mib} MiB is too little memory for a guest (at least 64 MiB)"
        )
    return mib


def parse_switch(value: str, source: str) -> bool:
    """true/false, yes/no, on/off, 1/0 (any case); :raise pytest.UsageError: otherwise."""
    text = value.strip().lower()
    if text in ("true", "yes", "on", "1"):
        return True
    if text in ("false", "no", "off", "0"):
        return False
    raise pytest.UsageError(f"{source}: expected true or false, got {value!r}")


def parse_cpus(value: str | int, source: str) -> int:
    """A positive CPU count; :raise pytest.UsageError: otherwise."""
    try:
        cpus = int(value)
    except (TypeError, ValueError):
        raise pytest.UsageError(f"{source}: expected a number of CPUs, got {value!r}") from None
    if cpus < 1 or isinstance(value, bool):
        raise pytest.UsageError(f"{source}: expected at least 1 CPU, got {value!r}")
    return cpus


def _ready_command(value: str, source: str) -> str:
    if problem := ready_command_problem(value):
        raise pytest.UsageError(f"{source}: {problem}")
    return value


def _choice(value: str, spec: OptionSpec, source: str) -> str:
    assert spec.choices is not None
    if value not in spec.choices:
        raise pytest.UsageError(f"{source}: {value!r} is not one of {', '.join(spec.choices)}")
    return value


def _raw_value(config: pytest.Config, spec: OptionSpec) -> tuple[str | None, str, Path]:
    """The option's text, where it came from, and the directory relative paths start at."""
    cli = config.getoption(spec.ini)
    if cli is not None:
        return str(cli), spec.flag, config.invocation_params.dir
    ini = str(config.getini(spec.ini) or "").strip()
    base = config.inipath.parent if config.inipath is not None else config.rootpath
    if ini:
        return ini, f"ini key {spec.ini}", base
    return None, "", base


def _image_spec(value: str, base: Path) -> str:
    """Paths are taken relative to where they were given; built-in names stay names."""
    candidate = base / value
    if "/" in value or value.endswith((".json", ".qcow2", ".img", ".raw")) or candidate.exists():
        return str(candidate.resolve())
    return value


OPTIONS_KEY = pytest.StashKey["AdareOptions"]()
"""Where ``pytest_configure`` keeps the session's options."""


def adare_options(config: pytest.Config) -> AdareOptions:
    """The session's merged, validated options."""
    return config.stash[OPTIONS_KEY]


def read_options(config: pytest.Config) -> AdareOptions:
    """Merge command line and ini into validated options.

    :raise pytest.UsageError: on any bad value, naming the flag or ini key.
    """
    values: dict[str, Any] = {}
    for spec in OPTION_SPECS:
        raw, source, base = _raw_value(config, spec)
        if raw is None:
            continue
        if spec.choices:
            values[spec.name] = _choice(raw, spec, source)
        elif spec.name == "memory":
            values["memory_mib"] = parse_memory(raw, source)
        elif spec.name == "cpus":
            values["cpus"] = parse_cpus(raw, source)
        elif spec.name == "artifacts":
            values["artifacts"] = (base / raw).resolve()
        elif spec.name == "vm":
            values["vm"] = _image_spec(raw, base)
        elif spec.name == "hypervisor" and raw.strip():
            values["hypervisors"] = parse_hypervisors(raw, base, source)
        elif spec.name == "ready_command":
            values["ready_command"] = _ready_command(raw, source)
        elif spec.name == "hypervisor_limit":
            values["hypervisor_limit"] = parse_limit(raw, source)
        elif spec.switch:
            values[spec.name] = parse_switch(raw, source)
    if values.get("hypervisors"):
        values["hypervisor"] = assign_hypervisor(
            values["hypervisors"], *worker_of(config), values.get("hypervisor_limit")
        )
    return AdareOptions(**values)


def apply_marker(options: AdareOptions, marker: pytest.Mark | None) -> VMRequest:
    """The test's :class:`VMRequest`: the session options with its marker laid on top.

    :raise ValueError: for unknown marker arguments or bad values (says which).
    """
    kwargs: dict[str, Any] = dict(marker.kwargs) if marker is not None else {}
    if marker is not None and marker.args:
        raise ValueError(
            "adare_vm(...) takes keyword arguments only, e.g. @pytest.mark.adare_vm(gui=True)"
        )
    unknown = sorted(set(kwargs) - set(MARKER_KEYS))
    if unknown:
        raise ValueError(
            f"adare_vm marker: unknown argument(s) {', '.join(unknown)}; "
            f"known: {', '.join(MARKER_KEYS)}"
        )
    image = kwargs.get("image") or options.vm
    if not image:
        raise ValueError("no VM image: pass --adare-vm=IMAGE or adare_vm(image=...)")
    source = "adare_vm marker"
    gui = kwargs.get("gui")
    gui_mode = _marker_choice(options.gui, GUI_MODES, "gui")
    if isinstance(gui, str):
        gui_mode = _marker_choice(gui, GUI_MODES, "gui")
    elif gui is not None and not isinstance(gui, bool):
        raise ValueError(
            f"adare_vm marker: gui must be True, False, 'auto', 'agent' or 'host', got {gui!r}"
        )
    hypervisor = kwargs.get("hypervisor", options.hypervisor)
    if hypervisor is not None and not isinstance(hypervisor, str):
        raise ValueError(f"adare_vm marker: hypervisor must be a libvirt URI, got {hypervisor!r}")
    # A libvirt hypervisor reaches the agent over its serial channel unless asked otherwise.
    default_transport = "serial" if hypervisor else options.transport
    transport = _marker_choice(kwargs.get("transport", default_transport), TRANSPORTS, "transport")
    network = kwargs.get("network", transport != "serial")
    if not isinstance(network, bool):
        raise ValueError(f"adare_vm marker: network must be True or False, got {network!r}")
    if not network and transport != "serial":
        raise ValueError(
            "adare_vm marker: network=False needs transport='serial' (the "
            "websocket transport reaches the agent through the network)"
        )
    os_name = kwargs.get("os")
    if os_name is not None:
        os_name = _marker_choice(os_name, OS_NAMES, "os")
    try:
        memory = (
            options.memory_mib
            if kwargs.get("memory") is None
            else parse_memory(kwargs["memory"], source + " memory")
        )
        cpus = (
            options.cpus
            if kwargs.get("cpus") is None
            else parse_cpus(kwargs["cpus"], source + " cpus")
        )
    except pytest.UsageError as error:
        raise ValueError(str(error)) from None
    vm_options = VMOptions(
        memory_mib=memory,
        cpus=cpus,
        accel=_marker_choice(kwargs.get("accel", options.accel), ACCELS, "accel"),
        transport=transport,
        network=network,
        gui=gui_mode,
        clock=_marker_clock(kwargs.get("clock")),
        warm=_marker_choice(kwargs.get("warm", options.warm), WARM_MODES, "warm"),
        firmware=_marker_choice(
            kwargs.get("firmware", options.firmware), FIRMWARE_CHOICES, "firmware"
        ),
        hypervisor=hypervisor or None,
        ready_command=_marker_ready_command(kwargs.get("ready_command", options.ready_command)),
    )
    return VMRequest(
        image=str(image),
        options=vm_options,
        isolation=_marker_choice(
            kwargs.get("isolation", options.isolation), ISOLATIONS, "isolation"
        ),
        needs_desktop=bool(gui),
        needs_os=os_name,
    )


def _marker_ready_command(value: Any) -> str | None:
    if value is None:
        return None
    if problem := ready_command_problem(value):
        raise ValueError(f"adare_vm marker: ready_command {problem}")
    return str(value)


def _marker_clock(value: Any) -> str | None:
    if value is not None and not isinstance(value, str):
        raise ValueError(f"adare_vm marker: clock must be an ISO 8601 string, got {value!r}")
    return value


def session_request(options: AdareOptions) -> VMRequest:
    """The session VM's request (no marker)."""
    return apply_marker(options, None)


def _marker_choice(value: Any, choices: tuple[C, ...], key: str) -> C:
    for choice in choices:
        if value == choice:
            return choice
    raise ValueError(f"adare_vm marker: {key}={value!r} is not one of {', '.join(choices)}")
