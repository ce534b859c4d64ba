"""A running :class:`~pytest_adare.vm.VM` as an owner serves it, and its registration.

:func:`register` claims a name, writes the entry and starts the owner's socket on the
shared loop; :class:`Registration` undoes both. Used by ``adare-vm run``, the plugin's
pause (``--adare-pause-on-fail``, ``guest.breakpoint()``) and the keeper.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, cast

from pytest_adare.agent.terminal import TerminalTransport
from pytest_adare.interactive import registry
from pytest_adare.interactive.owner import OwnerServer
from pytest_adare.loop_thread import shared_loop

if TYPE_CHECKING:
    from pytest_adare.vm import VM


class VMReach:
    """What the owner server needs of a VM: its agent connection and its screen."""

    def __init__(self, vm: VM) -> None:
        self.vm = vm

    def connection(self) -> TerminalTransport:
        return cast(TerminalTransport, self.vm.guest.aio.connection)

    async def screen_png(self) -> bytes:
        return await self.vm.machine.ascreendump_png()


def reach_info(vm: VM) -> dict[str, Any]:
    """How the VM is reached directly (kept in the 0600 entry)."""
    info: dict[str, Any] = {"transport": vm.transport, "token": vm.token}
    machine = vm.machine
    with contextlib.suppress(Exception):
        if machine.agent_port is not None:
            info["agent"] = f"127.0.0.1:{machine.agent_port}"
    with contextlib.suppress(Exception):
        info["serial"] = str(machine.agent_serial_path)
    with contextlib.suppress(Exception):
        if machine.qmp_path is not None:
            info["qmp"] = str(machine.qmp_path)
    info["workdir"] = str(machine.workdir)
    return info


class Registration:
    """One registered VM: its entry and its owner's socket."""

    def __init__(self, entry: registry.Entry, server: OwnerServer) -> None:
        self.entry = entry
        self.server = server

    @property
    def name(self) -> str:
        return self.entry.name

    def hint(self) -> str:
        """The lines printed for the user: how to enter it and see its screen."""
        return (
            f"adare-vm shell {self.name}    (screen: adare-vm screen {self.name} FILE.png; "
            f"image {self.entry.image})"
        )

    def close(self) -> None:
        """Stop serving and forget the entry."""
        with contextlib.suppress(Exception):
            shared_loop().run(self.server.close(), timeout=10)
        registry.remove(self.name)


def register(
    vm: VM,
    *,
    base: str,
    image: str,
    owner: str,
    on_stop: Callable[[], Awaitable[None] | None],
    run: str = "",
) -> Registration:
    """Register ``vm`` under the first free name ``BASE0@RUN``… and serve it.

    ``run`` names the run it belongs to (default: this process's pid).
    """
    entry = registry.claim(
        base, registry.Entry(name="", image=image, owner=owner, owner_pid=os.getpid(), run=run)
    )
    entry.reach = reach_info(vm)
    registry.update(entry)
    server = OwnerServer(VMReach(vm), entry.socket, on_stop)
    try:
        shared_loop().run(server.start(), timeout=10)
    except BaseException:
        registry.remove(entry.name)
        raise
    return Registration(entry, server)
