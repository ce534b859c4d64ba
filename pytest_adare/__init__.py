"""pytest-adare: QEMU guest VMs as pytest fixtures (host side).

Outside pytest the runtime is one call::

    from pytest_adare import launch

    with launch("debian") as vm:
        print(vm.guest.shell("uname -a").stdout)

The names below resolve on first use (PEP 562): pytest loads this package for
every run through the plugin entry point, and a project that never boots a VM
must not pay for QEMU, websockets, PIL or numpy.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_adare.agent.testfunction_upload import GuestTestWarning, assert_outcome
    from pytest_adare.errors import (
        AdareError,
        AgentDisconnected,
        AgentUnreachable,
        CommandFailed,
        GuestCommandFailed,
        GuestWaitTimeout,
        ImageError,
        InfrastructureError,
        ProtocolViolation,
        ToolError,
        VMDied,
        VMLaunchError,
        VMTimeout,
    )
    from pytest_adare.forensics.diff import FsDiff
    from pytest_adare.forensics.entry import SnapshotFormatError
    from pytest_adare.forensics.snapshot import FsSnapshot, SnapshotPages
    from pytest_adare.guest import AsyncGuest, Guest, ShellResult, TestOutcome
    from pytest_adare.guest_journal import JournalEntry
    from pytest_adare.lan.addressing import LanError
    from pytest_adare.launch import launch
    from pytest_adare.machine_tools.port_forward import PortForwardError
    from pytest_adare.plugin.fixtures import VMFactory
    from pytest_adare.screen.match import Box, NeedleError
    from pytest_adare.vm import VM

_EXPORTS = {
    "AdareError": "pytest_adare.errors",
    "AgentDisconnected": "pytest_adare.errors",
    "AgentUnreachable": "pytest_adare.errors",
    "CommandFailed": "pytest_adare.errors",
    "GuestCommandFailed": "pytest_adare.errors",
    "GuestWaitTimeout": "pytest_adare.errors",
    "ImageError": "pytest_adare.errors",
    "InfrastructureError": "pytest_adare.errors",
    "LanError": "pytest_adare.lan.addressing",
    "ProtocolViolation": "pytest_adare.errors",
    "ToolError": "pytest_adare.errors",
    "VMDied": "pytest_adare.errors",
    "VMLaunchError": "pytest_adare.errors",
    "VMTimeout": "pytest_adare.errors",
    "AsyncGuest": "pytest_adare.guest",
    "Guest": "pytest_adare.guest",
    "ShellResult": "pytest_adare.guest",
    "TestOutcome": "pytest_adare.guest",
    "JournalEntry": "pytest_adare.guest_journal",
    "launch": "pytest_adare.launch",
    "VM": "pytest_adare.vm",
    "FsSnapshot": "pytest_adare.forensics.snapshot",
    "SnapshotPages": "pytest_adare.forensics.snapshot",
    "SnapshotFormatError": "pytest_adare.forensics.entry",
    "FsDiff": "pytest_adare.forensics.diff",
    "Box": "pytest_adare.screen.match",
    "NeedleError": "pytest_adare.screen.match",
    "VMFactory": "pytest_adare.plugin.fixtures",
    "PortForwardError": "pytest_adare.machine_tools.port_forward",
    "assert_outcome": "pytest_adare.agent.testfunction_upload",
    "GuestTestWarning": "pytest_adare.agent.testfunction_upload",
}

__all__ = [
    "VM",
    "AdareError",
    "AgentDisconnected",
    "AgentUnreachable",
    "AsyncGuest",
    "Box",
    "CommandFailed",
    "FsDiff",
    "FsSnapshot",
    "Guest",
    "GuestCommandFailed",
    "GuestTestWarning",
    "GuestWaitTimeout",
    "ImageError",
    "InfrastructureError",
    "JournalEntry",
    "LanError",
    "NeedleError",
    "PortForwardError",
    "ProtocolViolation",
    "ShellResult",
    "SnapshotFormatError",
    "SnapshotPages",
    "TestOutcome",
    "ToolError",
    "VMDied",
    "VMFactory",
    "VMLaunchError",
    "VMTimeout",
    "assert_outcome",
    "launch",
]
# Each public name and the module that defines it.


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'pytest_adare' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
