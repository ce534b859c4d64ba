"""The readiness contract: :class:`Readiness` and what a check reads of the VM."""

from __future__ import annotations

from typing import Protocol

from pytest_adare.agent.install import GuestLayout
from pytest_adare.guest import Guest
from pytest_adare.machine.base import MachineBackend


class ReadyTarget(Protocol):
    """What a check reads of the VM (:class:`~pytest_adare.vm_phases.state.VMState` fits)."""

    @property
    def machine(self) -> MachineBackend: ...
    @property
    def guest(self) -> Guest: ...
    @property
    def transport(self) -> str: ...
    @property
    def layout(self) -> GuestLayout: ...


class Readiness(Protocol):
    """One way to tell the guest is ready."""

    async def wait(self, target: ReadyTarget) -> str | None:
        """Wait until ready; what was seen, or None when there was nothing to wait for.

        :raise VMTimeout: a bound the check owns passed (the message names what it awaited).
        """
        ...
