"""How one VM is configured: the single frozen :class:`VMOptions` (a leaf module).

``launch()``, the plugin's options and markers, and the pool all build one of these
and hand it to :class:`~pytest_adare.vm.VM`; the allowed values live here once.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Literal, get_args

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


@dataclass(frozen=True)
class VMOptions:
    """Everything that configures one VM besides its image (hashable: equal options,
    same VM in the plugin's pool).

    ``memory_mib``/``cpus`` default to the image's; ``transport`` is how the host reaches
    the agent (``serial`` works without a network card); ``gui`` routes screenshots and
    input to the agent (``agent``) or to QEMU (``host``), or lets the VM choose (``auto``:
    the agent's on a desktop image whose agent can take a screenshot, else QEMU's; see
    ``VM.gui_choice``); ``install="qga"`` installs the
    agent over QGA even where the image could hand it over at boot.

    :raise ValueError: naming the bad field and the allowed values.
    """

    memory_mib: int | None = None
    cpus: int | None = None
    accel: Accel = "auto"
    transport: Transport = "websocket"
    network: bool = True
    gui: GuiMode = "auto"
    install: Install = "auto"
    boot_timeout: float = BOOT_TIMEOUT
    desktop_timeout: float = DESKTOP_TIMEOUT
    firmware: FirmwareChoice = "auto"
    """What boots a disk without a direct-boot kernel: ``auto`` = the manifest's, or for a
    bare disk what its partition table says (GPT + EFI system partition → ``uefi``)."""
    clock: str | None = None
    """The guest's clock at boot, ISO 8601 (``2024-03-01T09:00:00Z``; no offset = UTC);
    it then runs on the VM's virtual clock. None: the host's time."""
    warm: Warm = "auto"
    """``auto``: start from the ready state a first cold boot saved in the cache (same
    image, agent bundle, QEMU and machine), saving it when there is none; ``off``: always
    boot cold."""
    hypervisor: str | None = None
    """A libvirt URI (``qemu:///system``, ``qemu+ssh://user@host/system``): the guest runs
    as a transient domain there (docs/libvirt.md). None: QEMU started by this process."""
    ready_command: str | None = None
    """A guest shell command that exits 0 once the guest is ready for tests (e.g.
    ``systemctl is-active my-app``): run after the agent connects, again every second
    until it does, within :attr:`ready_timeout`; it replaces the wait for systemd.
    None: the image manifest's ``ready_command``, else systemd's own verdict."""
    ready_timeout: float = READY_TIMEOUT

    def __post_init__(self) -> None:
        if self.clock is not None:
            rtc_base(self.clock)
        ready = self.ready_command
        if ready is not None and (problem := ready_command_problem(ready)):
            raise ValueError(f"ready_command {problem}")
        if self.ready_timeout <= 0:
            raise ValueError(f"ready_timeout must be positive, got {self.ready_timeout}")
        checks: tuple[tuple[str, tuple[str, ...]], ...] = (
            ("accel", ACCELS),
            ("transport", TRANSPORTS),
            ("gui", GUI_MODES),
            ("install", INSTALLS),
            ("warm", WARM_MODES),
            ("firmware", FIRMWARE_CHOICES),
        )
        for name, allowed in checks:
            value = getattr(self, name)
            if value not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {value!r}")
        if self.hypervisor is not None:
            if "://" not in self.hypervisor or any(c.isspace() for c in self.hypervisor):
                raise ValueError(
                    f"hypervisor must be a libvirt URI like qemu:///system, got {self.hypervisor!r}"
                )
            if self.transport != "serial":
                raise ValueError(
                    "a libvirt hypervisor reaches the agent over its serial channel (no port "
                    "forwarding): use transport='serial'"
                )
        if self.transport == "websocket" and not self.network:
            raise ValueError("transport='websocket' needs the network; use transport='serial'")
        if self.memory_mib is not None and self.memory_mib < 64:
            raise ValueError(f"memory_mib must be at least 64, got {self.memory_mib}")
        if self.cpus is not None and self.cpus < 1:
            raise ValueError(f"cpus must be at least 1, got {self.cpus}")
        if self.boot_timeout <= 0 or self.desktop_timeout <= 0:
            raise ValueError("boot_timeout and desktop_timeout must be positive")

    @property
    def rtc_base(self) -> str | None:
        """:attr:`clock` as QEMU's ``-rtc base=`` value (UTC), or None."""
        return None if self.clock is None else rtc_base(self.clock)

    def describe(self) -> str:
        """Short text naming what differs from the defaults, e.g. ``transport=serial``."""
        parts = [f"accel={self.accel}", f"transport={self.transport}"]
        if self.memory_mib is not None:
            parts.append(f"memory={self.memory_mib}M")
        if self.cpus is not None:
            parts.append(f"cpus={self.cpus}")
        if self.clock is not None:
            parts.append(f"clock={self.clock}")
        if not self.network:
            parts.append("no network")
        if self.gui != "auto":
            parts.append(f"gui={self.gui}")
        if self.firmware != "auto":
            parts.append(f"firmware={self.firmware}")
        if self.hypervisor is not None:
            parts.append(f"hypervisor={self.hypervisor}")
        if self.ready_command is not None:
            parts.append(f"ready_command={self.ready_command!r}")
        return " ".join(parts)
