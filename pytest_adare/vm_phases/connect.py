"""Connecting to the agent: the transport, the guest facade on it, and disconnects.

Every snapshot step closes the agent connection first and connects again after: the
guest's TCP state is saved and restored with its RAM, so a WebSocket kept open across
``loadvm`` would point at a connection the restored guest never had (the host's side
hangs), and one kept across ``savevm`` would be restored later with a stale sequence
number. A fresh connection costs ~0.1 s; a hang costs the whole call timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

from pytest_adare.agent.connection import AgentConnection
from pytest_adare.agent.serial_client import SerialAgentClient
from pytest_adare.agent.websocket_client import AgentClient
from pytest_adare.errors import AgentDisconnected, AgentUnreachable
from pytest_adare.guest import AsyncGuest, Guest
from pytest_adare.vm_phases.diagnose import diagnose
from pytest_adare.vm_phases.gui import host_screen
from pytest_adare.vm_phases.stall import install_stall_check
from pytest_adare.vm_phases.state import VMState

SERIAL_CONNECT_TIMEOUT = 30.0
CLOSE_TIMEOUT = 10.0


async def open_transport(vm: VMState, token: str) -> AgentConnection:
    """Connect to the agent over ``vm.transport`` with ``token`` (the default connector;
    the serial link needs no token: only this host holds its socket).

    :raise AgentUnreachable: the agent did not answer (not yet diagnosed).
    """
    if vm.transport == "serial":
        path = vm.machine.agent_serial_path
        try:
            return await SerialAgentClient.connect(path, timeout=SERIAL_CONNECT_TIMEOUT)
        except AgentDisconnected as exc:
            raise AgentUnreachable(
                f"the agent does not answer on its serial link {path}",
                {"attempts": [str(exc)]},
            ) from exc
    port = vm.machine.agent_port
    assert port is not None, "websocket transport without a forwarded port"
    return await AgentClient.connect("127.0.0.1", port, token, backoff=0.5)


async def connect(vm: VMState, token: str | None = None) -> AgentConnection:
    """Connect with ``token`` (default: the VM's own); a failure is diagnosed.

    :raise VMDied: the machine died meanwhile.
    :raise AgentUnreachable: with the decided cause.
    """
    connector = vm.connector or open_transport
    try:
        connection = await connector(vm, token or vm.token)
    except AgentUnreachable as failure:
        vm.machine.check_alive()
        raise await diagnose(vm, failure) from failure
    # A call that hears nothing asks this VM's side paths what the agent is doing.
    install_stall_check(vm, connection)
    return connection


def attach(vm: VMState, connection: AgentConnection) -> Guest:
    """The guest facade on ``connection`` (a restarted machine keeps the same facade, so
    the test's ``guest`` and its event subscribers survive a reboot)."""
    screen = None if vm.options.gui == "agent" else host_screen(vm)
    guest = vm.current_guest
    if guest is None:
        aio = AsyncGuest(
            connection, screen=screen, agent_root=vm.layout.run_dir, user=vm.manifest.user
        )
        return vm.adopt_guest(Guest(aio))
    guest.aio.attach(connection)
    guest.aio.use_screen(screen)
    return guest


async def first_connect(vm: VMState) -> None:
    """The ``connect`` phase of a cold start."""
    t = time.monotonic()
    connection = await connect(vm)
    attach(vm, connection)
    version = connection.server_info.get("version", "?")
    vm.record("connect", t, f"{vm.transport}, agent {version}")


async def disconnect(vm: VMState) -> None:
    """Close the agent connection, if any (errors and a hang are swallowed: the
    connection is being given up)."""
    guest = vm.current_guest
    if guest is not None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(guest.aio.connection.close(), CLOSE_TIMEOUT)


async def close_links(vm: VMState) -> None:
    """Close the agent connection and the QGA client, if any (the machine stays)."""
    await disconnect(vm)
    qga = vm.current_qga
    if qga is not None:
        await qga.close()


async def reconnect(vm: VMState) -> None:
    """Attach a fresh connection to the existing facade."""
    vm.guest.aio.attach(await connect(vm))
