"""Pause with the VMs alive: register them, say how to step in, wait for Enter.

``--adare-pause-on-fail`` (a failing test, before its teardown) and ``guest.breakpoint()``
(anywhere in a test) come here. The prompt and the Enter go through the terminal
pytest runs in (``/dev/tty``), past pytest's output capture; ``adare-vm stop NAME``
from another terminal ends the pause too. Both follow the same rules
(:func:`pause_problem`): no pause in an xdist worker, in CI, or without a terminal, where
nobody would press Enter and the run would wait forever.
"""

from __future__ import annotations

import io
import os
import re
import select
import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from pytest_adare.agent.terminal import TerminalTransport
from pytest_adare.interactive import registry
from pytest_adare.interactive.owner import OwnerServer
from pytest_adare.interactive.reach import Registration, register
from pytest_adare.loop_thread import shared_loop

if TYPE_CHECKING:
    from pytest_adare.guest import Guest
    from pytest_adare.vm import VM

TTY = "/dev/tty"


NOT_CI = ("", "0", "false", "no", "off")
"""Values of ``CI`` that do not mean a CI run (CI services set ``CI=true``)."""


class NoTerminal(RuntimeError):
    """Nobody can answer a pause here (an xdist worker, CI, no controlling tty)."""


def terminal_problem(path: str = TTY) -> str | None:
    """Why pausing cannot work here (no terminal), else None."""
    try:
        with open(path, "rb", buffering=0):
            return None
    except OSError as exc:
        return f"cannot open {path}: {exc.strerror} (no terminal to wait for Enter on)"


def pause_problem(
    *, xdist: bool, environ: Mapping[str, str] = os.environ, tty: str = TTY
) -> str | None:
    """Why a pause would wait forever here, else None; the words follow the option's name
    (``--adare-pause-on-fail needs a terminal: ...``, ``guest.breakpoint() cannot ...``).

    ``xdist``: this is an xdist run or worker. A CI run (``CI=true``) may well give pytest
    a pseudo-terminal, but nobody is at it.

    >>> pause_problem(xdist=False, environ={"CI": "true"})
    "cannot pause in CI (CI='true'): nobody would press Enter (unset CI to pause)"
    """
    if xdist:
        return (
            "cannot be used with xdist (-n): workers have no terminal to wait on, and a "
            "paused worker would hold the whole run"
        )
    ci = environ.get("CI", "")
    if ci.strip().lower() not in NOT_CI:
        return f"cannot pause in CI (CI={ci[:20]!r}): nobody would press Enter (unset CI to pause)"
    problem = terminal_problem(tty)
    return None if problem is None else f"needs a terminal: {problem}"


def name_base(test_name: str) -> str:
    """``test_name-vm`` for a test's VMs (names stay short and shell-safe).

    >>> name_base("test_login[debian-desktop]")
    'test_login-debian-desktop-vm'
    """
    cleaned = re.sub(r"[^A-Za-z0-9_.-]+", "-", test_name).strip("-")[:40]
    return f"{cleaned or 'test'}-vm"


def pause_vms(vms: Sequence[VM], *, test_name: str, why: str, owner: str) -> None:
    """Register ``vms``, print how to enter each on the terminal, wait for Enter.

    :raise NoTerminal: no terminal to wait on.
    """
    stop = threading.Event()
    registrations: list[Registration] = []
    try:
        for vm in vms:
            image = str(getattr(vm.manifest, "name", "") or "vm")
            registrations.append(
                register(vm, base=name_base(test_name), image=image, owner=owner, on_stop=stop.set)
            )
        _wait_for_enter(why, registrations, stop)
    finally:
        for registration in registrations:
            registration.close()


class _GuestReach:
    """A guest alone (``guest.breakpoint()``): its connection and its screen."""

    def __init__(self, guest: Guest) -> None:
        self.guest = guest

    def connection(self) -> TerminalTransport:
        connection: TerminalTransport = self.guest.aio.connection  # type: ignore[assignment]
        return connection

    async def screen_png(self) -> bytes:
        image = await self.guest.aio.screenshot()
        out = io.BytesIO()
        image.save(out, "PNG")
        return out.getvalue()


def pause_guest(guest: Guest, *, test_name: str, owner: str) -> None:
    """The pause of ``guest.breakpoint()``: one guest, reached over its own connection."""
    stop = threading.Event()
    entry = registry.claim(
        name_base(test_name),
        registry.Entry(name="", image="guest", owner=owner, owner_pid=os.getpid()),
    )
    server = OwnerServer(_GuestReach(guest), entry.socket, stop.set)
    registration = Registration(entry, server)
    try:
        shared_loop().run(server.start(), timeout=10)
        _wait_for_enter("guest.breakpoint()", [registration], stop)
    finally:
        registration.close()


def _wait_for_enter(why: str, registrations: Sequence[Registration], stop: threading.Event) -> None:
    try:
        tty = open(TTY, "r+b", buffering=0)
    except OSError as exc:
        raise NoTerminal(f"cannot pause: {TTY}: {exc.strerror}") from None
    with tty:
        lines = [f"\nadare: paused ({why}); the VM is alive:"]
        lines += [f"adare:   {r.hint()}" for r in registrations]
        lines.append("adare: press Enter to continue (teardown)")
        tty.write(("\n".join(lines) + "\n").encode())
        while not stop.is_set():
            ready, _, _ = select.select([tty], [], [], 0.5)
            if ready:
                if tty.readline() is not None:
                    break
        tty.write(b"adare: continuing\n")
