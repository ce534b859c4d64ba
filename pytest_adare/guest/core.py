"""What every section of the facade stands on: :class:`GuestCore` holds the connection
and the loop it lives on, the one ``call()`` primitive, the :class:`Screen` input goes
to, the forwarded ports and the :class:`EventHub` agent events fan out from."""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import Callable, Coroutine, Iterator, Sequence
from typing import Any, Protocol, TypeVar

from PIL import Image

from pytest_adare.agent.connection import AgentConnection, EventCallback
from pytest_adare.agent.screen import AgentScreen
from pytest_adare.errors import ToolError
from pytest_adare.forensics.snapshot import FsSnapshot
from pytest_adare.loop_thread import shared_loop
from pytest_adare.machine_tools.port_forward import PortForwardError, PortForwards

T = TypeVar("T")


class Screen(Protocol):
    """The guest's screen and input, wherever they are reached from.

    :class:`~pytest_adare.agent.screen.AgentScreen` (agent tools) and
    :class:`~pytest_adare.machine_tools.screen.QemuScreen` (QMP) implement it; coordinates
    are screen pixels.
    """

    async def screenshot(self) -> Image.Image: ...
    async def move(self, x: int, y: int) -> None: ...
    async def click(self, x: int, y: int, button: str = "left", count: int = 1) -> None: ...
    async def drag(self, x1: int, y1: int, x2: int, y2: int) -> None: ...
    async def scroll(self, direction: str, amount: int) -> None: ...
    async def type_text(self, text: str) -> None: ...
    async def press(self, key: str) -> None: ...
    async def hotkey(self, keys: Sequence[str]) -> None: ...


def tool_result(tool: str, result: dict[str, Any]) -> dict[str, Any]:
    """Return ``result`` unless it reports a tool-level failure (``status == "error"``).

    :raise ToolError: carrying the agent's message and the whole result.
    """
    if result.get("status") == "error":
        raise ToolError(tool, str(result.get("message", "tool reported an error")), result)
    return result


class EventHub:
    """Fans agent events out to subscribers; survives reconnects of the VM's client."""

    def __init__(self) -> None:
        self._subscribers: list[EventCallback] = []

    def subscribe(self, callback: EventCallback) -> Callable[[], None]:
        """Call ``callback(event)`` (on the loop thread) for every event; returns unsubscribe."""
        self._subscribers.append(callback)
        return lambda: self._subscribers.remove(callback) if callback in self._subscribers else None

    @contextlib.contextmanager
    def record(self) -> Iterator[list[Any]]:
        """Collect the events that arrive inside the ``with`` block into a list."""
        seen: list[Any] = []
        unsubscribe = self.subscribe(seen.append)
        try:
            yield seen
        finally:
            unsubscribe()

    async def dispatch(self, event: Any) -> None:
        """Deliver one event to every subscriber (the connection calls this)."""
        for callback in list(self._subscribers):
            outcome = callback(event)
            if asyncio.iscoroutine(outcome):
                await outcome


class GuestCore:
    """The state every section of :class:`~pytest_adare.guest.AsyncGuest` shares: the
    connection, the loop it lives on, the one :meth:`call`, the screen, forwarded ports
    and events.
    """

    def __init__(
        self,
        connection: AgentConnection,
        *,
        screen: Screen | None = None,
        agent_root: str | None = None,
    ) -> None:
        self.events = EventHub()
        self.agent_root = agent_root
        """Where the agent and the plugin write in the guest (its run dir), if known;
        :meth:`fs_snapshot` leaves it out unless ``include_agent=True``."""
        self._connection = connection
        self._unsubscribe = connection.subscribe(self.events.dispatch)
        self._agent_screen = AgentScreen(self._checked)
        self._screen: Screen = screen or self._agent_screen
        self._ports: PortForwards | None = None
        # The last snapshot of each root, weakly: the next one of that root shares its
        # path strings (a before/after pair holds each path once).
        self._last_snapshots: weakref.WeakValueDictionary[str, FsSnapshot] = (
            weakref.WeakValueDictionary()
        )
        self.shared_paths: tuple[str, ...] = ()
        """Where shared host folders are mounted (``share=``): not the guest's own files,
        so :meth:`fs_snapshot` leaves them out unless ``include_shares=True``."""
        try:
            self._home = asyncio.get_running_loop()
        except RuntimeError:
            self._home = shared_loop().loop

    async def on_home_loop(self, coro: Coroutine[Any, Any, T]) -> T:
        """Await ``coro`` on the connection's loop, from whichever loop runs the caller."""
        if asyncio.get_running_loop() is self._home:
            return await coro
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self._home))

    @property
    def connection(self) -> AgentConnection:
        """The live transport (replaced by :meth:`attach` after a reconnect)."""
        return self._connection

    def attach(self, connection: AgentConnection) -> None:
        """Switch to a new connection (after ``loadvm``/reboot); subscribers stay."""
        self._unsubscribe()
        self._connection = connection
        self._unsubscribe = connection.subscribe(self.events.dispatch)

    @property
    def screen(self) -> Screen:
        """Where screenshots and input go: the agent's GUI tools unless :meth:`use_screen`."""
        return self._screen

    def use_screen(self, screen: Screen | None) -> None:
        """Route screenshots and input to ``screen`` (``None``: the agent's GUI tools)."""
        self._screen = screen or self._agent_screen

    @property
    def server_info(self) -> dict[str, Any]:
        """The agent's identity: version, bundle_hash, platform, tools."""
        return self._connection.server_info

    # -- forwarded ports ---------------------------------------------------------------

    def use_ports(self, forwards: PortForwards | None) -> None:
        """Answer :meth:`port` and :meth:`forward` from ``forwards`` (the VM's)."""
        self._ports = forwards

    def _forwards(self) -> PortForwards:
        if self._ports is None:
            raise PortForwardError("this guest has no forwarded ports (not started by a VM)")
        return self._ports

    def port(self, port: int | str) -> tuple[str, int]:
        """The host address reaching the guest's forwarded ``port`` (``80``, ``"53/udp"``),
        e.g. ``("127.0.0.1", 49321)``.

        :raise PortForwardError: the port is not forwarded (``ports=`` or :meth:`forward`).
        """
        return self._forwards().get(port).address

    def url(self, port: int, path: str = "/", *, scheme: str = "http") -> str:
        """``http://127.0.0.1:49321/`` for the guest's forwarded TCP ``port`` and ``path``."""
        host, host_port = self.port(port)
        return f"{scheme}://{host}:{host_port}/{path.lstrip('/')}"

    async def forward(self, port: int | str) -> tuple[str, int]:
        """Forward the guest's ``port`` now (a free port on the host's 127.0.0.1); its
        host address. It lasts until the VM stops (restores keep it; a reboot makes it
        again).

        :raise PortForwardError: already forwarded, or the VM cannot forward.
        """
        return (await self.on_home_loop(self._forwards().add(port))).address

    async def unforward(self, port: int | str) -> None:
        """End the forward of the guest's ``port``.

        :raise PortForwardError: it is not forwarded.
        """
        await self.on_home_loop(self._forwards().remove(port))

    async def call(
        self, tool: str, /, *, timeout: float | None = None, **params: Any
    ) -> dict[str, Any]:
        """Call any agent tool; returns its raw ``result`` dict (``success=false`` raises)."""
        return await self.on_home_loop(self._connection.call(tool, params, timeout))

    async def _checked(self, tool: str, /, **params: Any) -> dict[str, Any]:
        return tool_result(tool, await self.call(tool, **params))
