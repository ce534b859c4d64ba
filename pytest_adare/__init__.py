"""pytest-adare: QEMU guest VMs as pytest fixtures (host side).

Outside pytest the runtime is one call::

    from pytest_adare import launch

    with launch("debian") as vm:
        print(vm.guest.shell("uname -a").stdout)
"""

from pytest_adare.errors import (
    AdareError,
    AgentDisconnected,
    AgentUnreachable,
    GuestCommandFailed,
    ImageError,
    ToolError,
    VMDied,
    VMLaunchError,
    VMTimeout,
)
from pytest_adare.guest import AsyncGuest, Guest, ShellResult, TestOutcome
from pytest_adare.launch import launch
from pytest_adare.vm import VM

__all__ = [
    "VM",
    "AdareError",
    "AgentDisconnected",
    "AgentUnreachable",
    "AsyncGuest",
    "Guest",
    "GuestCommandFailed",
    "ImageError",
    "ShellResult",
    "TestOutcome",
    "ToolError",
    "VMDied",
    "VMLaunchError",
    "VMTimeout",
    "launch",
]
