"""Which saved ready state a VM may start from, and what QEMU needs to load it.

The first cold boot of a combination (image, agent bundle, QEMU, machine) saves its
ready state in the cache (:mod:`pytest_adare.machine_tools.saved_state`); every later VM of the
same combination, in this or any later pytest session or xdist worker, loads it
instead of booting (:class:`~pytest_adare.vm.VM` does both). :func:`warm_plan` decides
whether that may happen and under which key: the key covers every fact that decides
whether a saved state fits (the files the guest booted from by path, size and mtime;
the bundle; QEMU's version; the accelerator; every ``saved`` field of the machine's
:class:`~pytest_adare.machine.spec.MachineSpec`; the agent's run dir),
so a change of any of them makes a new key and the old state is simply not used. A
state another user could have written is not used either (the plan is cold only and
its reason says which file).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

from pytest_adare.machine.base import Capability
from pytest_adare.machine.registry import Backend
from pytest_adare.machine.spec import AgentLink, MachineSpec, spec_from_options
from pytest_adare.machine_tools.accel import AccelChoice, qemu_version
from pytest_adare.machine_tools.saved_state import SavedState, UntrustedState, find_state, state_key
from pytest_adare.vm_options import VMOptions

QEMU_BINARY = "qemu-system-x86_64"


OPTIONS_BESIDE_THE_SPEC: Mapping[str, str] = {
    "transport": "no: the saved agent serves both links",
    "gui": "no: chosen after every start",
    "install": "in the key: the hand-off route (handoff)",
    "boot_timeout": "no: a bound on the host's wait",
    "desktop_timeout": "no: a bound on the host's wait",
    "ready_timeout": "no: a bound on the host's wait",
    "firmware": "boots cold: a firmware-booted disk has no direct-boot kernel",
    "clock": "boots cold: it is the spec's rtc_base",
    "warm": "boots cold with warm='off'",
    "backend": "boots cold on a backend without MIGRATION",
    "hypervisor": "boots cold: its backend (libvirt) has no MIGRATION",
    "ready_command": "in the key: the state is saved once it passes (ready)",
    "ports": "no: forwards are made after every start, warm or cold",
    "share": "boots cold: it is the spec's share_disks",
}
"""How each :class:`VMOptions` field that is not a
:class:`~pytest_adare.machine.spec.MachineSpec` field meets a saved state (the spec's
fields say it in their own metadata); ``tests/unit/pytest_adare/machine/test_spec.py`` fails for an
option that is in neither."""


class WarmImage(Protocol):
    """What the plan reads of an image (``ImageManifest`` fits)."""

    @property
    def disk(self) -> Path | None: ...
    @property
    def kernel(self) -> Path | None: ...
    @property
    def initrd(self) -> Path | None: ...
    @property
    def append(self) -> str | None: ...
    @property
    def memory_mib(self) -> int | None: ...
    @property
    def desktop(self) -> bool: ...


@dataclass(frozen=True)
class WarmPlan:
    """Whether a VM starts warm: ``key`` None means cold only (``reason`` says why);
    ``saved`` is the state to load, None when the cold boot will save one."""

    key: str | None
    saved: SavedState | None
    reason: str


def _identity(path: Path | None) -> str:
    if path is None:
        return "-"
    # By path, size and mtime, not by content: hashing a GiB disk for every VM would cost
    # more than the boot a warm start saves, and a rebuilt image gets a new mtime.
    stat = path.stat()
    return f"{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}"


def planned_spec(options: VMOptions) -> MachineSpec:
    """The spec a VM with ``options`` will start with, as far as it is known before the
    start: each share stands for the disk it will get."""
    return spec_from_options(options, share_disks=tuple(Path(s.host) for s in options.share))


def cold_only_reason(
    image: WarmImage, options: VMOptions, custom_config: bool, backend: Backend
) -> str | None:
    """Why this VM must boot cold, or None when a warm start is possible: off, a backend
    without :attr:`~pytest_adare.machine.base.Capability.MIGRATION`, no direct-boot
    kernel, a ``cold`` field of the spec (a scenario clock, a share), a custom config."""
    if options.warm == "off":
        return "warm start off (warm='off')"
    if Capability.MIGRATION not in backend.capabilities:
        return f"the {backend.name} backend cannot save and load a whole VM state"
    if image.kernel is None:
        return "a firmware-booted disk (warm start needs a direct-boot kernel)"
    reasons = planned_spec(options).cold_reasons()
    if reasons:
        return reasons[0]
    if custom_config:
        return "a custom agent config"
    return None


def warm_plan(
    image: WarmImage,
    options: VMOptions,
    *,
    accel: AccelChoice,
    bundle_hash: str,
    run_dir: str,
    handoff: str,
    backend: Backend,
    agent_link: AgentLink = "uart",
    ready_command: str | None = None,
    custom_config: bool = False,
    root: Path | None = None,
) -> WarmPlan:
    """The plan for a VM of ``image`` with ``options`` whose QEMU will run under ``accel``;
    ``ready_command`` is the VM's readiness command (options', else manifest's).

    The key holds every ``saved`` field of the machine's spec
    (:meth:`~pytest_adare.machine.spec.MachineSpec.state_parts`: memory, CPUs, network,
    the agent's link, LAN NICs, and any field added with that role) beside the facts of
    the image, the bundle, QEMU and the guest's readiness."""
    reason = cold_only_reason(image, options, custom_config, backend)
    if reason is not None:
        return WarmPlan(None, None, reason)
    spec = replace(planned_spec(options), agent_link=agent_link)
    parts = {
        "qemu": qemu_version(QEMU_BINARY),
        "disk": _identity(image.disk),
        "kernel": _identity(image.kernel),
        "initrd": _identity(image.initrd),
        "append": image.append or "",
        "bundle": bundle_hash,
        "image_memory": str(image.memory_mib or ""),
        **dict(spec.state_parts()),
        "accel": f"{accel.accel}/{accel.cpu_model}",
        "desktop": str(image.desktop),
        "run_dir": run_dir,
        "handoff": handoff,
        # The state is saved once the guest is ready, so it is only as ready as this says.
        "ready": ready_command or "",
    }
    key = state_key(parts)
    try:
        saved = find_state(key, root)
    except UntrustedState as refused:
        # Cold only: neither load it nor save over it (it is not ours to replace).
        return WarmPlan(None, None, f"{refused}; booting cold")
    if saved is None:
        return WarmPlan(key, None, f"no saved ready state yet ({key[:12]}): cold boot saves it")
    # A warm VM prints no "qemu:" line: this line says the accelerator (part of the key).
    return WarmPlan(key, saved, f"saved ready state {key[:12]} saved under {accel.reason}")


def boot_files(initrd: Path | None, fw_cfg: Mapping[str, Path]) -> tuple[dict[str, Path], str]:
    """The files to save with a state (by file name) and how to map them back (JSON)."""
    files: dict[str, Path] = {}
    names: dict[str, str] = {}
    if initrd is not None:
        files["initrd"] = initrd
    for index, (name, path) in enumerate(sorted(fw_cfg.items())):
        files[f"fw_cfg{index}"] = path
        names[name] = f"fw_cfg{index}"
    return files, json.dumps(names)


def saved_boot_inputs(saved: SavedState) -> tuple[Path | None, dict[str, Path]]:
    """(initrd, fw_cfg entries) to start QEMU with so it can load ``saved``.

    QEMU must be given the very files the saved machine booted with: their sizes are
    part of the state it loads.
    """
    initrd = saved.file("initrd")
    names = json.loads(saved.meta.get("fw_cfg", "{}"))
    fw_cfg = {str(name): saved.file(str(file)) for name, file in dict(names).items()}
    return (initrd if initrd.is_file() else None), fw_cfg
