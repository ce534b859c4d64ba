"""A keeper: the process that owns a kept VM, serves it, and stops it when asked or idle.

``adare-vm run --keep`` forks one that boots the image; ``--adare-keep`` starts one on a
handover directory (:mod:`pytest_adare.interactive.handover`) whose VM warm-starts from
the failing test's state::

    python -m pytest_adare.interactive.keeper DIR

It prints ``READY NAME`` on stdout once the VM is registered, then logs to ``NAME.log``
in the registry directory.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from pytest_adare.interactive import registry
from pytest_adare.interactive.reach import Registration


def serve_until_idle(
    registration: Registration, stop: threading.Event, idle_minutes: float
) -> None:
    """Return when ``adare-vm stop`` set ``stop``, or nobody used the VM for ``idle_minutes``."""
    idle = idle_minutes * 60
    server = registration.server
    while not stop.wait(1.0):
        if server.sessions == 0 and time.monotonic() - server.last_active > idle:
            print(f"idle for {idle_minutes:g} min: stopping", flush=True)
            return


def announce(name: str, progress_fd: int) -> None:
    """Say ``READY NAME`` on ``progress_fd``, then log to the registry's ``NAME.log``."""
    os.write(progress_fd, f"READY {name}\n".encode())
    log = registry.registry_dir() / f"{name}.log"
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    for target in (1, 2):
        os.dup2(fd, target)
    os.close(fd)
    if progress_fd not in (1, 2):
        os.close(progress_fd)


def keep_handed_over(directory: Path) -> int:
    """Warm-start the VM saved in ``directory``, serve it until stopped; 0 when it ran."""
    # Deferred: the whole runtime, only in a keeper.
    from pytest_adare.image.resolve import resolve_image
    from pytest_adare.interactive.handover import HANDOVER, STATE_KEY
    from pytest_adare.interactive.pause import name_base
    from pytest_adare.interactive.reach import register
    from pytest_adare.loop_thread import shared_loop
    from pytest_adare.machine_tools.run_dir import claim_run_dir
    from pytest_adare.machine_tools.saved_state import find_state
    from pytest_adare.vm import VM
    from pytest_adare.vm_options import VMOptions
    from pytest_adare.vm_phases.bundle import build_bundle
    from pytest_adare.vm_phases.warm import warm_start

    try:
        claim_run_dir(directory)  # it goes with this keeper, not the pytest that made it
        handover = json.loads((directory / HANDOVER).read_text())
        saved = find_state(STATE_KEY, directory)
        if saved is None:
            print(f"keeper: no saved state in {directory}", file=sys.stderr)
            return 1
        manifest = resolve_image(handover["image"])
        vm = VM(manifest, directory / "vm", VMOptions(**handover["options"]), name="kept")
        stop = threading.Event()
        try:
            shared_loop().run(build_bundle(vm.state))
            if not shared_loop().run(warm_start(vm.state, saved)):
                print("keeper: the saved state did not load (see above)", file=sys.stderr)
                return 1
            registration = register(
                vm,
                base=name_base(str(handover["test_name"])),
                image=manifest.name,
                owner=f"{handover['owner']} (kept, keeper pid {os.getpid()})",
                on_stop=stop.set,
                run=str(handover.get("run", "")),
            )
            try:
                announce(registration.name, 1)
                serve_until_idle(registration, stop, float(handover["idle_minutes"]))
            finally:
                registration.close()
        finally:
            vm.close()
        return 0
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1 or not Path(args[0]).is_dir():
        print("usage: python -m pytest_adare.interactive.keeper HANDOVER_DIR", file=sys.stderr)
        return 2
    os.close(0)
    os.open(os.devnull, os.O_RDONLY)
    return keep_handed_over(Path(args[0]))


if __name__ == "__main__":
    sys.exit(main())
