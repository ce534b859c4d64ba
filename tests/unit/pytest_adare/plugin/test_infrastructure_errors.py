"""Which errors mean the machine broke (an ERROR) rather than the test's check (a FAILURE):
decided by one base class, so a new error cannot be forgotten in a list."""

from __future__ import annotations

import pytest

from pytest_adare import errors
from pytest_adare.errors import InfrastructureError
from pytest_adare.machine.base import MachineCommandError, UnsupportedFeature
from pytest_adare.machine.results import MemoryDumpFailed
from pytest_adare.plugin.pool import VMBroken, is_infrastructure_error

BROKEN = [
    errors.VMLaunchError("no QEMU", exitcode=1, command=["qemu"], output=""),
    errors.VMTimeout("the agent", 1.0),
    errors.VMDied("QEMU exited"),
    errors.ImageError("no disk"),
    errors.QGAError("no answer"),
    errors.SnapshotError("loadvm failed"),
    errors.MigrationError("migrate failed"),
    errors.AgentUnreachable("refused"),
    errors.AgentDisconnected("gone"),
    errors.ProtocolViolation("garbage"),
    MemoryDumpFailed("dump-guest-memory failed"),
    MachineCommandError("refused", command="cont"),
    UnsupportedFeature("libvirt", "migration"),
    VMBroken("debian", "first cause"),
]


@pytest.mark.parametrize("error", BROKEN, ids=lambda e: type(e).__name__)
def test_a_broken_machine_is_an_infrastructure_error(error: Exception) -> None:
    assert isinstance(error, InfrastructureError)
    assert is_infrastructure_error(error)


def test_a_failed_dump_is_still_a_runtime_error_for_old_callers() -> None:
    assert isinstance(MemoryDumpFailed("x"), RuntimeError)


class _Result:
    command, returncode, stdout, stderr = "false", 1, "", ""


@pytest.mark.parametrize(
    "error",
    [
        AssertionError("the test's own check"),
        errors.GuestCommandFailed(_Result()),
        errors.ToolError("execute_shell", "bad param"),
        errors.GuestWaitTimeout("a file", 1.0, 3, "absent"),
        ValueError("a bug in the test"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_what_the_test_itself_got_wrong_is_not(error: Exception) -> None:
    assert not is_infrastructure_error(error)
