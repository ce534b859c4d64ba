"""Why the agent cannot be reached: facts from the serial link and QGA, then the pure
:func:`pytest_adare.agent.diagnosis.unreachable` names the cause."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from adare_guest.config import DEFAULT_PORT
from pytest_adare.agent.diagnosis import AgentFacts, guest_facts, serial_health, unreachable
from pytest_adare.agent.install import qga_run
from pytest_adare.agent.serial_client import SerialAgentClient
from pytest_adare.errors import AdareError, AgentUnreachable, QGAError
from pytest_adare.vm_phases.delivery import await_qga
from pytest_adare.vm_phases.state import VMState

QGA_TIMEOUT = 20.0
PING_TIMEOUT = 5.0


async def diagnose(vm: VMState, failure: AgentUnreachable) -> AgentUnreachable:
    """Ask the serial link and QGA what is wrong; the decided cause as the error (with
    the console's tail)."""
    facts = AgentFacts(
        port=int(vm.agent_config.get("port", DEFAULT_PORT)),
        connect_errors=list(failure.details.get("attempts", [str(failure)])),
        log_path=vm.layout.log_path,
    )

    async def ping() -> dict[str, Any]:
        return await SerialAgentClient.ping_path(vm.machine.agent_serial_path, PING_TIMEOUT)

    async def run(argv: Sequence[str], timeout: float) -> tuple[int, str, str]:
        return await qga_run(vm.qga, argv, timeout)

    if vm.transport != "serial":  # over serial the failed connect was that ping already
        await serial_health(ping, facts)
    try:
        await await_qga(vm, QGA_TIMEOUT)
    except (QGAError, AdareError) as exc:
        facts.qga_error = str(exc).splitlines()[0]
    else:
        logs = [vm.layout.log_path, vm.layout.output_path]
        await guest_facts(run, facts, logs, vm.layout.python)
    diagnosed = unreachable(facts)
    diagnosed.console_tail = vm.machine.console_tail(20)
    return diagnosed
