"""Readiness: when a started guest counts as ready, one small strategy per way of telling.

Each check is a :class:`Readiness` (testcontainers' ``WaitStrategy`` is the model): one
``wait(target)`` that returns what it saw, for the phase line, or None when there was
nothing to wait for, and raises :class:`~pytest_adare.errors.VMTimeout` when a bound it
owns passes. :func:`settle` picks the checks a connected VM needs (the user's ready
command, else the systemd wait; the desktop's focus on desktop images) and records one
phase each. Adding a way of telling is adding a module here and a line in
:func:`checks_after_connect`.
"""

from __future__ import annotations

import time

from pytest_adare.vm_options import BOOT_TIMEOUT
from pytest_adare.vm_phases.readiness.base import Readiness, ReadyTarget
from pytest_adare.vm_phases.readiness.desktop import FocusedDesktop
from pytest_adare.vm_phases.readiness.listening import Listening
from pytest_adare.vm_phases.readiness.ready_command import ReadyCommand
from pytest_adare.vm_phases.readiness.systemd import SystemRunning, settle_timeout
from pytest_adare.vm_phases.state import VMState

__all__ = [
    "FocusedDesktop",
    "Listening",
    "Readiness",
    "ReadyCommand",
    "ReadyTarget",
    "SystemRunning",
    "settle",
]


def checks_after_connect(vm: VMState) -> list[tuple[str, Readiness]]:
    """The (phase name, check) pairs a connected VM runs, in order."""
    checks: list[tuple[str, Readiness]] = []
    if vm.ready_command is not None:
        command = ReadyCommand(vm.ready_command, vm.options.ready_timeout)
        checks.append(("settle", command))
    elif not vm.handoff:  # a built-in image's init starts nothing that must settle first
        bound = settle_timeout(vm.options.boot_timeout, BOOT_TIMEOUT)
        checks.append(("settle", SystemRunning(bound)))
    if vm.manifest.desktop:
        checks.append(("desktop", FocusedDesktop(vm.options.desktop_timeout)))
    return checks


async def settle(vm: VMState) -> None:
    """Run :func:`checks_after_connect` and record a phase for each that waited."""
    for name, check in checks_after_connect(vm):
        t = time.monotonic()
        seen = await check.wait(vm)
        if seen is not None:
            vm.record(name, t, seen)
