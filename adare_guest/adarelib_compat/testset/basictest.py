"""adarelib's ``HostModeCategory`` (recorded on a test function, otherwise unused here)."""

from __future__ import annotations

import enum


class HostModeCategory(str, enum.Enum):
    """How adare would run a test without its in-guest agent; pytest-adare always has one."""

    FILE_BASED = "file_based"
    FILE_CONTENT = "file_content"
    QGA_PROBE = "qga_probe"
    HOST_NATIVE = "host_native"
    AGENT_ONLY = "agent_only"
