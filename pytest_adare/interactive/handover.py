"""Keep a failing test's VM running after pytest: a copy of it, handed to a keeper.

Why a copy: pytest's QEMU cannot outlive pytest (the reaper's ``PR_SET_PDEATHSIG``, QMP
served from inside pytest), and the pool goes on using the VM for the next tests. So
when a test fails, :func:`hand_over` saves the VM's whole state right then, before the
test's teardown (the migration a warm start loads: RAM, devices, the disk overlay, the
boot files), lets the VM run on for pytest, and starts a keeper (``python -m
pytest_adare.interactive.keeper DIR``, a session of its own, not pytest's child in any
way that matters) that warm-starts a VM from that state. The kept VM goes on from the
moment the test failed: same processes, files, console; its agent gets a token of its
own. The keeper registers it (``adare-vm list``), serves ``adare-vm shell``/``screen``/
``stop``, stops it after an idle time and removes the state directory.

The state directory (0700, files 0600: it holds the guest's RAM and the agent's token)
is ``adare-kept-*`` in the temporary directory, not in the runtime directory, which is
often RAM.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_adare.errors import AdareError
from pytest_adare.loop_thread import shared_loop
from pytest_adare.machine_tools.run_dir import make_run_dir
from pytest_adare.machine_tools.saved_state import save_machine_state
from pytest_adare.vm_phases.connect import disconnect, reconnect
from pytest_adare.warm_start import boot_files

if TYPE_CHECKING:
    from pytest_adare.vm import VM

HANDOVER = "handover.json"
STATE_KEY = "kept"
"""The one state in a handover directory
(:func:`~pytest_adare.machine_tools.saved_state.find_state`)."""
READY_WAIT = 300.0
"""Seconds the keeper may take to load the state and connect (TCG on a busy host)."""
SAVE_TIMEOUT = 300.0


class HandoverError(AdareError):
    """The VM could not be handed to a keeper (the message says why)."""


def cannot_hand_over(vm: VM) -> str | None:
    """Why ``vm`` cannot be kept running, else None."""
    # Deferred: only a handover needs the machine contract.
    from pytest_adare.machine.base import Capability, unsupported

    if Capability.MIGRATION not in vm.machine.capabilities:
        return str(unsupported(vm.machine.backend, Capability.MIGRATION))
    if vm.options.lan_ports:
        return "a LAN member: its LAN's hub ends with pytest"
    return None


def hand_over(
    vm: VM, *, image: str, test_name: str, owner: str, idle_minutes: float, run: str
) -> str:
    """Copy ``vm`` (running, state as it is now) into a keeper; the kept VM's name.

    ``image`` is what the plugin resolved the VM's image from (the keeper resolves it
    again); ``run`` names the pytest run in the kept VM's name (``TEST-vm0@RUN``).
    ``vm`` itself runs on, reconnected.

    :raise HandoverError: it cannot be kept (see :func:`cannot_hand_over`), saving the
        state failed, or the keeper did not come up.
    """
    why = cannot_hand_over(vm)
    if why is not None:
        raise HandoverError(f"not kept running: {why}")
    # 0700; the keeper claims it as its own (machine_tools.run_dir), pytest may end first.
    directory = make_run_dir("adare-kept-")
    try:
        shared_loop().run(_save(vm, directory), timeout=SAVE_TIMEOUT + 30)
        options = asdict(vm.options)
        del options["lan_ports"]
        handover = {
            "image": image,
            "options": options,
            "test_name": test_name,
            "owner": owner,
            "idle_minutes": idle_minutes,
            "run": run,
        }
        fd = os.open(directory / HANDOVER, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            json.dump(handover, out)
        return _start_keeper(directory)
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)
        raise


async def _save(vm: VM, directory: Path) -> None:
    config = getattr(vm.machine, "launched_config", None)
    initrd = getattr(config, "initrd", None)
    files, names = boot_files(initrd, dict(getattr(config, "fw_cfg", {}) or {}))
    # Like a warm state: no agent session inside it (the keeper's VM starts with none).
    await disconnect(vm.state)
    try:
        meta = {
            "agent_token": vm.token,
            "fw_cfg": names,
            "console_tail": "\n".join(vm.machine.console_tail(200)),
        }
        await save_machine_state(vm.machine, STATE_KEY, files, meta, directory, SAVE_TIMEOUT)
    finally:
        await vm.machine.aresume()  # saving leaves the machine paused
        await reconnect(vm.state)


def _start_keeper(directory: Path) -> str:
    """Start the keeper on ``directory``; its VM's name once it is registered."""
    log = directory / "keeper.log"
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    env = dict(os.environ)
    # The keeper imports this very checkout, whatever the working directory.
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    try:
        keeper = subprocess.Popen(
            [sys.executable, "-m", "pytest_adare.interactive.keeper", str(directory)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=fd,
            start_new_session=True,  # outside pytest's session: pytest's end is not its end
            env=env,
        )
    finally:
        os.close(fd)
    assert keeper.stdout is not None
    deadline = time.monotonic() + READY_WAIT
    line = b""
    with keeper.stdout:
        while not line.endswith(b"\n") and time.monotonic() < deadline:
            ready, _, _ = select.select([keeper.stdout], [], [], deadline - time.monotonic())
            chunk = os.read(keeper.stdout.fileno(), 256) if ready else b""
            if not chunk:
                break
            line += chunk
    if line.startswith(b"READY "):
        return line.split()[1].decode()
    with contextlib.suppress(ProcessLookupError):
        os.killpg(keeper.pid, 9)
    keeper.wait()
    # The log goes with the directory: its last line (the error, or the traceback's end)
    # is what the one-line hint can hold.
    lines = log.read_text(errors="replace").strip().splitlines() if log.exists() else []
    said = lines[-1] if lines else f"it said {line!r} and ended"
    raise HandoverError(f"the keeper did not start the kept VM: {said}")
