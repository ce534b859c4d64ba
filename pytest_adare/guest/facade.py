"""The facade a test holds: :class:`AsyncGuest`, composed of the sections (commands,
files, GUI, forensics, waits, clock, test functions), and its sync twin :class:`Guest`,
each of whose methods runs the async one on the shared loop thread."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from pytest_adare.agent.connection import AgentConnection
from pytest_adare.guest.clock import GuestClock
from pytest_adare.guest.commands import GuestCommands
from pytest_adare.guest.core import EventHub, Screen
from pytest_adare.guest.files import GuestFiles
from pytest_adare.guest.forensics import GuestForensics
from pytest_adare.guest.gui import AsyncKeyboard, GuestGui
from pytest_adare.guest.results import ShellResult
from pytest_adare.guest.testfunctions import GuestTestFunctions
from pytest_adare.guest.waits import GuestWaits
from pytest_adare.guest_user import AsyncGuestUser, GuestUser
from pytest_adare.loop_thread import SyncTwin, sync_context_twin, sync_twin

if TYPE_CHECKING:
    from pytest_adare.playbook.results import PlaybookResult


# The sections listed last first: a class goes before its bases (waits and clock stand on
# commands, forensics on files), and the API page shows inherited methods from the core
# up, so it reads commands, files, GUI, forensics, waits, clock, test functions.
class AsyncGuest(
    GuestTestFunctions, GuestClock, GuestWaits, GuestForensics, GuestGui, GuestFiles,
    GuestCommands,
):  # fmt: skip
    """The async core of the facade.

    The connection lives on the loop it was made on (the shared loop thread for VMs);
    awaiting these methods from another loop (e.g. a pytest-asyncio test) is fine:
    the work is handed to the connection's loop and awaited from yours.
    """

    def __init__(
        self,
        connection: AgentConnection,
        *,
        screen: Screen | None = None,
        agent_root: str | None = None,
        user: str | None = None,
    ) -> None:
        super().__init__(connection, screen=screen, agent_root=agent_root)
        self.user: AsyncGuestUser[ShellResult] = AsyncGuestUser(self.shell, user)
        """The person at the keyboard (``user``: the image's, else the desktop session's,
        else root); see :mod:`pytest_adare.guest_user`."""
        self.keyboard = AsyncKeyboard(self)


class Keyboard(SyncTwin[AsyncKeyboard]):
    """``guest.keyboard``: sync twin of :class:`AsyncKeyboard`."""

    def __init__(self, aio: AsyncKeyboard) -> None:
        self.aio = aio

    type = sync_twin(AsyncKeyboard.type)
    press = sync_twin(AsyncKeyboard.press)
    hotkey = sync_twin(AsyncKeyboard.hotkey)


_breakpoint_hook: Callable[[Guest], None] | None = None


def set_breakpoint_hook(hook: Callable[[Guest], None] | None) -> None:
    """What :meth:`Guest.breakpoint` calls (the pytest plugin sets it for each test)."""
    global _breakpoint_hook
    _breakpoint_hook = hook


class Guest(SyncTwin[AsyncGuest]):
    """The synchronous facade; ``guest.aio`` is the :class:`AsyncGuest` it drives.

    Construct it from an :class:`AsyncGuest` (the VM does this); every method is the
    async method of the same name run on the shared loop thread, with the same
    parameters (see :func:`pytest_adare.loop_thread.sync_twin`). Event callbacks run
    on that thread.
    """

    def breakpoint(self) -> None:
        """Pause the test here with the VM alive: prints ``adare-vm shell NAME`` and waits
        for Enter on the terminal (docs/debugging.md). Needs pytest with this plugin.

        :raise RuntimeError: no pytest test is running (nothing set the hook).
        """
        if _breakpoint_hook is None:
            raise RuntimeError("guest.breakpoint() pauses a pytest test; none is running")
        _breakpoint_hook(self)

    def __init__(self, aio: AsyncGuest) -> None:
        self.aio = aio
        self.keyboard = Keyboard(aio.keyboard)
        self.user = GuestUser(aio.user)
        """The person at the keyboard: ``name``, ``uid``, ``home``, ``documents``,
        ``downloads``, ``desktop``, ``dirs``, ``run(cmd)``, ``start(cmd)``."""

    @property
    def events(self) -> EventHub:
        """Subscribe to agent events: ``guest.events.subscribe(cb)`` / ``.record()``."""
        return self.aio.events

    @property
    def server_info(self) -> dict[str, Any]:
        """The agent's identity: version, bundle_hash, platform, tools."""
        return self.aio.server_info

    @property
    def screen(self) -> Screen:
        """Where screenshots and input go (see :meth:`AsyncGuest.use_screen`)."""
        return self.aio.screen

    def use_screen(self, screen: Screen | None) -> None:
        """Route screenshots and input to ``screen`` (``None``: the agent's GUI tools)."""
        self.aio.use_screen(screen)

    def port(self, port: int | str) -> tuple[str, int]:
        """The host address of the guest's forwarded ``port`` (see :meth:`AsyncGuest.port`)."""
        return self.aio.port(port)

    def url(self, port: int, path: str = "/", *, scheme: str = "http") -> str:
        """The URL of the guest's forwarded TCP ``port`` (see :meth:`AsyncGuest.url`)."""
        return self.aio.url(port, path, scheme=scheme)

    call = sync_twin(AsyncGuest.call)
    shell = sync_twin(AsyncGuest.shell)
    pull = sync_twin(AsyncGuest.pull)
    push = sync_twin(AsyncGuest.push)
    screenshot = sync_twin(AsyncGuest.screenshot)
    click = sync_twin(AsyncGuest.click)
    double_click = sync_twin(AsyncGuest.double_click)
    right_click = sync_twin(AsyncGuest.right_click)
    goto = sync_twin(AsyncGuest.goto)
    drag = sync_twin(AsyncGuest.drag)
    scroll = sync_twin(AsyncGuest.scroll)
    wait_for_image = sync_twin(AsyncGuest.wait_for_image)
    click_image = sync_twin(AsyncGuest.click_image)
    screen_text = sync_twin(AsyncGuest.screen_text)
    find_text = sync_twin(AsyncGuest.find_text)
    wait_for_text = sync_twin(AsyncGuest.wait_for_text)
    click_text = sync_twin(AsyncGuest.click_text)
    fs_snapshot = sync_twin(AsyncGuest.fs_snapshot)
    watch_fs = sync_context_twin(AsyncGuest.watch_fs)
    pull_changed = sync_twin(AsyncGuest.pull_changed)
    upload_testfunctions = sync_twin(AsyncGuest.upload_testfunctions)
    install_dependencies = sync_twin(AsyncGuest.install_dependencies)
    set_variables = sync_twin(AsyncGuest.set_variables)
    run_test = sync_twin(AsyncGuest.run_test)
    set_time = sync_twin(AsyncGuest.set_time)
    wait_for_window = sync_twin(AsyncGuest.wait_for_window)
    succeed = sync_twin(AsyncGuest.succeed)
    fail = sync_twin(AsyncGuest.fail)
    wait_until_succeeds = sync_twin(AsyncGuest.wait_until_succeeds)
    wait_until_fails = sync_twin(AsyncGuest.wait_until_fails)
    wait_for_file = sync_twin(AsyncGuest.wait_for_file)
    wait_for_port = sync_twin(AsyncGuest.wait_for_port)
    forward = sync_twin(AsyncGuest.forward)
    unforward = sync_twin(AsyncGuest.unforward)
    wait_for_unit = sync_twin(AsyncGuest.wait_for_unit)
    journal = sync_twin(AsyncGuest.journal)
    now = sync_twin(AsyncGuest.now)
    idle = sync_twin(AsyncGuest.idle)

    def run_playbook(
        self, path: str | os.PathLike[str], *, variables: Mapping[str, Any] | None = None,
        artifacts: str | os.PathLike[str] | None = None,
    ) -> PlaybookResult:  # fmt: skip
        """Run the adare experiment at ``path`` here; its ``.verdicts``, ``.actions``,
        ``.passed`` (see :func:`pytest_adare.playbook.api.run_experiment`)."""
        # Deferred: YAML, Jinja2
        from pytest_adare.playbook.api import run_experiment

        return run_experiment(self, path, variables=variables, artifacts=artifacts)
