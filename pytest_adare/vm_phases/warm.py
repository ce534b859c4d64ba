"""The warm start: load the ready state the first cold boot of the same combination
saved, instead of booting (:mod:`pytest_adare.warm_start` says which state and why).

QEMU starts waiting for an incoming state, loads it, and the guest runs on from the
moment it was saved: its agent still holds the saving VM's token, its kernel the saved
RNG state, its clock the saved time. So the host connects once with the saved token and
installs this VM's own (``rekey``: the agent ends the sessions of the old token, so a
VM that loaded the same state cannot reach this one), reseeds the RNG, and sets the
clock (hours may have passed). Any failure discards that state and the VM boots cold,
which saves a new one.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import time
from dataclasses import replace
from datetime import datetime, timezone

from adare_guest.tool_names import REKEY, SEED_RANDOM
from pytest_adare.agent.install import uses_initrd_handoff
from pytest_adare.errors import AdareError
from pytest_adare.guest import tool_result
from pytest_adare.image.agent_bundle import AgentBundle
from pytest_adare.machine_tools.accel import choose_accel
from pytest_adare.machine_tools.saved_state import (
    SavedState,
    discard_state,
    find_state,
    save_machine_state,
    state_lock,
)
from pytest_adare.vm_phases.connect import attach, close_links, connect, disconnect, reconnect
from pytest_adare.vm_phases.gui import pick_gui
from pytest_adare.vm_phases.handoff import BootInputs
from pytest_adare.vm_phases.hypervisor import start_machine, stop_machine
from pytest_adare.vm_phases.state import VMState
from pytest_adare.warm_start import WarmPlan, boot_files, cold_only_reason, saved_boot_inputs
from pytest_adare.warm_start import warm_plan as plan_for

CALL_TIMEOUT = 30.0


async def warm_plan(vm: VMState, bundle: AgentBundle) -> WarmPlan:
    """Whether this VM, whose guest runs ``bundle``, may start warm, and from which
    state (said as one line)."""
    reason = cold_only_reason(vm.manifest, vm.options, vm.custom_config, vm.backend)
    if reason is not None:  # no key to compute, so no accelerator to choose either
        plan = WarmPlan(None, None, reason)
    else:
        route = "initrd" if uses_initrd_handoff(vm.manifest) else "fw_cfg"
        # The accelerator is part of the key; choosing it may boot a probe (seconds).
        accel = await asyncio.to_thread(
            choose_accel, vm.options.accel, probe_kernel=vm.manifest.kernel
        )
        plan = await asyncio.to_thread(
            plan_for, vm.manifest, vm.options, accel=accel,
            bundle_hash=bundle.bundle_hash, run_dir=str(vm.layout.run_dir),
            handoff=route if vm.handoff else "none", ready_command=vm.ready_command,
            backend=vm.backend, agent_link=vm.agent_link,
        )  # fmt: skip
    vm.say(f"warm: {plan.reason}")
    return plan


async def warm_start(vm: VMState, saved: SavedState) -> bool:
    """Start from ``saved``; False (after one line saying why) when that failed: the
    state is discarded, the machine stopped, and the phases so far forgotten."""
    t = time.monotonic()
    initrd, fw_cfg = saved_boot_inputs(saved)
    image = replace(vm.manifest, disk=saved.disk, format="qcow2", initrd=initrd)
    try:
        machine = await start_machine(vm, image, fw_cfg, incoming=True)
        # The console starts empty; failure reports should still show how it booted.
        boot_lines = saved.meta.get("console_tail", "")
        await machine.aseed_console(
            f"{boot_lines}\n[adare: warm start; the lines above are the saved boot's]\n"
        )
        await machine.aload_state(saved.state, vm.options.boot_timeout)
        vm.record("warm", t, f"ready state {saved.key[:12]} loaded")
        await _take_over(vm, saved.meta["agent_token"])
        await pick_gui(vm, saved.meta.get("gui"))
    except (AdareError, OSError) as error:
        first = str(error).splitlines()[0] if str(error) else type(error).__name__
        vm.say(f"warm: start failed ({first}); booting cold")
        discard_state(saved)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(close_links(vm), CALL_TIMEOUT)
        await stop_machine(vm)
        vm.drop_machine()
        vm.phases.clear()
        return False
    return True


async def _take_over(vm: VMState, saved_token: str) -> None:
    """The ``connect`` phase of a warm start: re-key, reseed, set the clock."""
    t = time.monotonic()
    connection = await connect(vm, saved_token)
    tool_result(REKEY, await connection.call(REKEY, {"token": vm.token}, CALL_TIMEOUT))
    # Every VM loaded from this state has the saved kernel RNG state: reseed it from
    # the host, so two of them do not draw the same "random" numbers.
    seed = base64.b64encode(os.urandom(64)).decode("ascii")
    seeded = await connection.call(SEED_RANDOM, {"data": seed}, CALL_TIMEOUT)
    reseeded = (
        "RNG reseeded" if seeded.get("status") == "success"
        else f"RNG not reseeded ({str(seeded.get('error'))[:100]})"
    )  # fmt: skip
    guest = attach(vm, connection).aio
    if vm.layout.os == "windows":
        await guest.set_time(datetime.now(timezone.utc))
    else:  # the system clock only: hwclock -w would wait for the RTC's next second
        await guest.shell(f"date -u -s @{time.time():.6f} >/dev/null", timeout=CALL_TIMEOUT)
    vm.record("connect", t, f"{vm.transport}, agent re-keyed, {reseeded}, guest clock set")


async def save_warm(vm: VMState, key: str, inputs: BootInputs) -> None:
    """Save this freshly booted VM's ready state for later VMs (once per key: the lock
    makes a second process wait, then find the first one's state and keep it)."""
    t = time.monotonic()
    lock = state_lock(key)
    try:
        # A file lock across processes: waiting for it must not stall the shared loop.
        await asyncio.to_thread(lock.__enter__)
        try:
            if await asyncio.to_thread(find_state, key) is not None:
                detail = f"ready state {key[:12]} was saved meanwhile by another VM"
            else:
                await _save(vm, key, inputs)
                detail = f"ready state {key[:12]} saved for later VMs"
        finally:
            await asyncio.to_thread(lock.__exit__, None, None, None)
    except (AdareError, OSError) as error:
        detail = f"ready state not saved: {str(error).splitlines()[0]}"
    vm.record("warm-save", t, detail)


async def _save(vm: VMState, key: str, inputs: BootInputs) -> None:
    files, names = boot_files(inputs.image.initrd, inputs.fw_cfg)
    # The saved state must hold no agent session: a VM loading it starts with none.
    await disconnect(vm)
    try:
        meta = {
            "agent_token": vm.token,
            "fw_cfg": names,
            "console_tail": "\n".join(vm.machine.console_tail(200)),
            # Where screenshots went once this state was ready: a VM loading it need not
            # ask the agent again (vm_phases.gui.choose_gui).
            "gui": vm.gui_choice.mode if vm.gui_choice is not None else "",
        }
        await save_machine_state(vm.machine, key, files, meta)
    finally:
        await vm.machine.aresume()  # saving leaves the machine paused
        await reconnect(vm)
