"""What a connected agent was doing when a call heard nothing from it: the ``stall_check``
the VM installs on its connection (:mod:`pytest_adare.agent.call_router`).

It asks the paths that do not go through the agent's session: QMP (a paused guest is
silent for a reason: keep waiting), the agent's serial link (its health report,
answered without the agent's event loop) and QGA (the agent log's tail); the pure
:func:`~pytest_adare.agent.stall_diagnosis.stall_cause` names the cause.
"""

from __future__ import annotations

import contextlib
from functools import partial
from typing import Any

from adare_guest.config import DEFAULT_PORT
from pytest_adare.agent.call_router import CallRouter, Stall
from pytest_adare.agent.install import qga_run
from pytest_adare.agent.serial_client import SerialAgentClient
from pytest_adare.agent.stall_diagnosis import agent_connections, describe_health, stall_cause
from pytest_adare.errors import format_tail
from pytest_adare.machine_tools.run_state import is_guest_running
from pytest_adare.vm_phases.state import VMState

PING_TIMEOUT = 5.0
LOG_TIMEOUT = 10.0
LOG_LINES = 15
CONSOLE_LINES = 10


def install_stall_check(vm: VMState, connection: object) -> None:
    """Let ``connection`` ask this VM what its agent does when a call hears nothing."""
    if isinstance(connection, CallRouter):
        connection.stall_check = partial(stall_check, vm)


async def stall_check(vm: VMState, tool: str, silent: float) -> Stall:
    """The cause and the agent's health, log tail and console tail as report lines."""
    if await _paused(vm):
        return Stall(False, ["the guest is paused"])
    health: dict[str, Any] | None = None
    try:
        health = await SerialAgentClient.ping_path(vm.machine.agent_serial_path, PING_TIMEOUT)
        seen = describe_health(health)
    except Exception as exc:  # whatever the side path does, the report goes on
        seen = _one_line(f"no answer ({type(exc).__name__}: {exc})")
    report = [
        f"cause: {stall_cause(health, tool, silent)}",
        f"agent health over its serial link: {seen}",
        await _connections(vm),
        await _log_tail(vm),
    ]
    return Stall(True, report, vm.machine.console_tail(CONSOLE_LINES))


async def _paused(vm: VMState) -> bool:
    aqmp = getattr(vm.machine, "aqmp", None)
    if aqmp is None:  # a backend without QMP: no way to tell, so not paused
        return False
    with contextlib.suppress(Exception):
        return vm.machine.is_running() and not await is_guest_running(vm.machine)  # type: ignore[arg-type]
    return False


async def _connections(vm: VMState) -> str:
    """The agent's TCP connections in the guest and their queues (QGA)."""
    if vm.layout.os == "windows" or vm.transport == "serial":
        return "(agent's TCP connections: not read on this guest or transport)"
    port = int(vm.agent_config.get("port", DEFAULT_PORT))
    argv = ["cat", "/proc/net/tcp", "/proc/net/tcp6"]
    try:
        _code, out, _err = await qga_run(vm.qga, argv, LOG_TIMEOUT)
    except Exception as exc:
        return _one_line(f"(agent's TCP connections unknown: {type(exc).__name__}: {exc})")
    found = agent_connections(out, port)
    return f"agent's TCP connections in the guest: {'; '.join(found) or 'none'}"


async def _log_tail(vm: VMState) -> str:
    """The agent log's last lines, read by QGA (the agent itself may be what is stuck)."""
    log = vm.layout.log_path
    if vm.layout.os == "windows":
        return f"(agent log {log}: read it with vm.agent_log_tail())"
    try:
        code, out, err = await qga_run(vm.qga, ["tail", "-n", str(LOG_LINES), log], LOG_TIMEOUT)
    except Exception as exc:
        return _one_line(f"(agent log {log} unavailable over QGA: {type(exc).__name__}: {exc})")
    if code != 0:
        return f"(agent log {log} unreadable: {err.strip()[:200]})"
    return format_tail(out.splitlines(), f"agent log tail ({log})")


def _one_line(text: str) -> str:
    return text.splitlines()[0] if text else text
