"""pytest-adare: QEMU guest VMs as pytest fixtures (host side)."""

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

__all__ = [
    "AdareError",
    "AgentDisconnected",
    "AgentUnreachable",
    "GuestCommandFailed",
    "ImageError",
    "ToolError",
    "VMDied",
    "VMLaunchError",
    "VMTimeout",
]
