"""What the Guest facade needs from a transport: the ``AgentConnection`` protocol.

Both :class:`pytest_adare.agent.websocket_client.AgentClient` (WebSocket) and
:class:`pytest_adare.agent.serial_client.SerialAgentClient` (DV serial link) satisfy it, so
the facade is written once over :meth:`AgentConnection.call`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol, runtime_checkable

from pytest_adare.agent.transfer_stream import TransferStream

EventCallback = Callable[[Any], "Awaitable[None] | None"]
"""A subscriber: called with each ``adare_guest.protocol.Event``; may be sync or async."""


@runtime_checkable
class AgentConnection(Protocol):
    """One live connection to the guest agent; all methods run on the shared loop."""

    @property
    def server_info(self) -> dict[str, Any]:
        """The agent's identity from the ``connect`` answer (version, bundle_hash, tools...)."""
        ...

    async def call(
        self, tool: str, params: dict[str, Any] | None = None, timeout: float | None = None
    ) -> dict[str, Any]:
        """Call ``tool`` and return its ``result`` dict.

        :raise ToolError: when the agent answers ``success=false``.
        :raise AgentDisconnected: when the connection drops before the answer.
        :raise VMTimeout: when no answer arrives within ``timeout`` seconds.
        """
        ...

    def subscribe(self, callback: EventCallback) -> Callable[[], None]:
        """Call ``callback`` for every event; returns a function that unsubscribes."""
        ...

    async def close(self) -> None:
        """Close the connection; pending calls fail with ``AgentDisconnected``."""
        ...


@runtime_checkable
class BinaryTransport(Protocol):
    """A connection that carries binary transfer messages (both host clients do).

    Whether the agent at the other end speaks them is a separate question: it offers
    ``pull_file`` and ``push_file`` among its tools (``server_info["tools"]``).
    """

    def open_stream(self, *, window: int, max_payload: int) -> TransferStream:
        """Register a new transfer id; the agent's messages for it go to the stream."""
        ...

    def close_stream(self, stream: TransferStream) -> None:
        """Forget a transfer."""
        ...

    async def send_binary(self, data: bytes) -> None:
        """Send one binary transfer message.

        :raise AgentDisconnected: the connection is gone.
        """
        ...
