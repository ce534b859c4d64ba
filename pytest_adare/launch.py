"""``launch()``: the whole runtime in one ``with`` statement, outside pytest too.

::

    from pytest_adare import launch

    with launch("debian") as vm:            # boot, install/hand off the agent, connect
        print(vm.guest.shell("uname -a").stdout)
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from pytest_adare.image.resolve import resolve_image
from pytest_adare.vm import VM
from pytest_adare.vm_options import (
    READY_TIMEOUT,
    Accel,
    FirmwareChoice,
    GuiMode,
    Transport,
    VMOptions,
    Warm,
)


def _print_progress(line: str) -> None:
    print(f"adare: {line}", file=sys.stderr, flush=True)


@contextmanager
def launch(
    image: str | Path,
    *,
    memory_mib: int | None = None,
    cpus: int | None = None,
    accel: Accel = "auto",
    transport: Transport | None = None,
    network: bool = True,
    clock: str | None = None,
    gui: GuiMode = "auto",
    warm: Warm = "auto",
    firmware: FirmwareChoice = "auto",
    hypervisor: str | None = None,
    ready_command: str | None = None,
    ready_timeout: float = READY_TIMEOUT,
    workdir: str | Path | None = None,
    keep_workdir: bool = False,
    progress: Callable[[str], None] | None = _print_progress,
) -> Iterator[VM]:
    """Boot ``image``, connect its agent, yield the :class:`VM` (``vm.guest``), then close.

    ``image`` is a manifest, its directory, a bare disk image or a built-in name
    (``debian``, ``debian-desktop``: built and cached on first use). ``transport`` is
    ``websocket`` or ``serial``; ``gui`` is ``auto`` (the agent's screen on a desktop
    image whose agent can take a screenshot, else QEMU's: ``vm.gui_choice`` says which
    and why), ``agent`` (pyautogui in the guest) or ``host`` (QMP screendump and input).
    Progress lines (one per boot phase, with its time) go to ``progress``; pass None for
    silence.

    ``firmware`` (``bios``/``uefi``) overrides what boots a disk without a kernel of its
    own (``auto``: the manifest's, or what a bare disk's partition table says).

    ``warm`` (``auto``/``off``): start from the ready state the first cold boot of the
    same image, bundle, QEMU and machine saved in the cache (``auto``, the default), or
    always boot cold.

    ``hypervisor`` (a libvirt URI, e.g. ``qemu:///system``): run the guest as a transient
    domain there (docs/libvirt.md); ``transport`` then defaults to ``serial`` (without a
    hypervisor: ``websocket``).

    ``clock`` (ISO 8601, e.g. ``"2024-03-01T09:00:00Z"``) boots the guest with its clock
    there, running on the VM's virtual clock.

    ``ready_command`` (a guest shell command, e.g. ``"systemctl is-active my-app"``): the
    VM is ready once it exits 0, tried every second for up to ``ready_timeout`` seconds
    after the agent connects (instead of waiting for systemd); default: the manifest's
    ``ready_command``, else systemd's own verdict on a disk of the user's.

    :raise ValueError: an option has a value it cannot take (before anything starts).
    :raise ImageError: the image spec cannot be resolved.
    :raise VMLaunchError: QEMU could not start.
    :raise VMTimeout: the guest or its agent did not come up in time.
    :raise VMDied: QEMU exited or the guest stopped while starting.
    :raise AgentUnreachable: the agent could not be connected (the message says why).
    """
    options = VMOptions(
        memory_mib=memory_mib,
        cpus=cpus,
        accel=accel,
        transport=transport or ("serial" if hypervisor else "websocket"),
        network=network,
        clock=clock,
        gui=gui,
        warm=warm,
        firmware=firmware,
        hypervisor=hypervisor,
        ready_command=ready_command,
        ready_timeout=ready_timeout,
    )
    manifest = resolve_image(str(image), progress=progress)
    own_dir = workdir is None
    root = Path(tempfile.mkdtemp(prefix="adare-vm-")) if workdir is None else Path(workdir)
    root.mkdir(parents=True, exist_ok=True)
    vm = VM(manifest, root, options)
    try:
        vm.start(progress=progress)
        yield vm
    finally:
        vm.close()
        if own_dir and not keep_workdir:
            shutil.rmtree(root, ignore_errors=True)
