"""How tool groups plug into the server: ``@tool``, :class:`ToolGroup`, :class:`CallContext`.

A tool is an ``async`` method of a :class:`ToolGroup` subclass, decorated with
:func:`tool`, taking a :class:`CallContext` and keyword-only parameters::

    class ClockTools(ToolGroup):
        @tool(timeout=5)
        async def get_timestamp(self, ctx: CallContext, *, use_local: bool = False) -> dict:
            return {"status": "success", "timestamp": time.time()}

The server validates the call's ``params`` against the signature and its
annotations before the tool runs: unknown, missing or wrongly typed params give
a ``success=false`` result naming the param. A tool returns the ``result`` dict
(``{"status": "success"|"error", "message": ..., ...}``); raising an exception
gives ``success=false`` with the exception text.

Timeouts: every tool has a budget, ``ctx.timeout``: the ``@tool(timeout=...)``
default, or the caller's ``timeout`` param when the tool declares one. The server
cancels the call (and kills its processes) :data:`TIMEOUT_GRACE` seconds after
the budget, so a tool that watches its budget can report its own timeout
(e.g. with partial output) first.

Blocking work goes to a thread with :meth:`CallContext.run_in_thread`; the thread
should poll :attr:`CallContext.cancelled` to stop early when the call is cancelled.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from adare_guest.backpressure import OutputBudget
from adare_guest.binary_transfer import Transfers
from adare_guest.config import AgentConfig
from adare_guest.processes import Process, kill_process_tree
from adare_guest.protocol import Event, EventType
from adare_guest.tool_params import (
    ParamSpec,
    describe_type,
    signature_params,
    validate_params,
)
from adare_guest.worker_pool import shared_pool

TIMEOUT_GRACE = 5.0
"""Seconds the server waits beyond a caller-given ``timeout`` before cancelling."""
T = TypeVar("T")
ToolFunc = Callable[..., Awaitable[dict[str, Any]]]
EmitFunc = Callable[[Event], Awaitable[None]]


@dataclass
class AgentState:
    """Mutable state shared by all sessions and tool groups of one agent process."""

    started_at: float = field(default_factory=time.time)
    started_monotonic: float = field(default_factory=time.monotonic)
    variables: dict[str, Any] = field(default_factory=dict)
    """Set by ``set_variables``; visible to test functions."""
    testfunctions_dir: str | None = None
    """Where the last ``upload_testfunctions`` extracted its archive."""
    testfunction_cache: dict[str, Any] = field(default_factory=dict)
    """Loaded test functions; cleared on re-upload."""
    screenshot_use_maim: bool = False
    """Set by ``set_screenshot_method``."""
    tool_names: list[str] = field(default_factory=list)
    """Every tool the server offers (filled in by the server)."""
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    """Guards the fields above when worker threads touch them."""

    def uptime(self) -> float:
        """Seconds since the agent started."""
        return time.monotonic() - self.started_monotonic


def with_error_key(result: dict[str, Any]) -> dict[str, Any]:
    """``result`` with ``error`` = ``message`` when its status is ``error`` and it has no
    ``error`` key: every tool's error result carries both (the server applies this)."""
    if result.get("status") == "error" and "error" not in result and "message" in result:
        result["error"] = result["message"]
    return result


class CallContext:
    """What a running tool knows about its call; one per tool call."""

    def __init__(
        self,
        *,
        call_id: str,
        tool: str,
        timeout: float,
        config: AgentConfig,
        state: AgentState,
        emit: EmitFunc | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
        output_budget: OutputBudget | None = None,
        transfers: Transfers | None = None,
    ) -> None:
        self.call_id = call_id
        self.tool = tool
        self.timeout = timeout
        """Seconds this call may run (the tool's own budget)."""
        self.config = config
        self.state = state
        self.cancelled = threading.Event()
        """Set when the call is cancelled (client gone, server timeout); threads poll it."""
        self.deadline = time.monotonic() + timeout
        self._emit = emit
        self._loop = loop
        self._processes: list[Process] = []
        self._lock = threading.Lock()
        self.output_budget = output_budget
        """The session's budget for results not yet sent (None: unlimited)."""
        self.transfers = transfers
        """The session's binary transfers (None: the transport carries no binary messages)."""
        self._reserved: list[int] = []  # shared with derived contexts (chain steps)

    def _event(self, event_type: EventType | str, data: Mapping[str, Any]) -> Event:
        payload = dict(data)
        payload["call_id"] = self.call_id
        return Event(EventType(event_type), payload)

    async def emit(self, event_type: EventType | str, data: Mapping[str, Any]) -> None:
        """Send an event tagged with ``data.call_id``.

        :raise ValueError: ``event_type`` is not one of DESIGN §3's event types.
        """
        event = self._event(event_type, data)
        if self._emit is not None:
            await self._emit(event)

    def emit_threadsafe(self, event_type: EventType | str, data: Mapping[str, Any]) -> None:
        """Like :meth:`emit`, callable from a worker thread (fire and forget)."""
        event = self._event(event_type, data)
        if self._emit is None or self._loop is None or self._loop.is_closed():
            return
        send = self._emit
        asyncio.run_coroutine_threadsafe(_send(send, event), self._loop)

    def track_process(self, proc: Process) -> None:
        """Kill ``proc``'s process group when this call is cancelled or times out.

        Start processes with ``start_new_session=True`` (POSIX) so the group is theirs.
        """
        with self._lock:
            self._processes.append(proc)

    def untrack_process(self, proc: Process) -> None:
        """Stop tracking ``proc`` (e.g. a ``background=True`` command that should outlive us)."""
        with self._lock:
            if proc in self._processes:
                self._processes.remove(proc)

    def kill_processes(self) -> None:
        """Kill every tracked process group (the server calls this on cancel/timeout)."""
        self.cancelled.set()
        with self._lock:
            procs, self._processes = self._processes, []
        for proc in procs:
            kill_process_tree(proc, self.call_id)

    def derive(self, tool: str, timeout: float) -> CallContext:
        """A context for a sub-call (``chain_commands``): same call id and event sink."""
        sub = CallContext(
            call_id=self.call_id,
            tool=tool,
            timeout=timeout,
            config=self.config,
            state=self.state,
            emit=self._emit,
            loop=self._loop,
            output_budget=self.output_budget,
            transfers=self.transfers,
        )
        sub._reserved = self._reserved  # the chain's reply carries the steps' results
        return sub

    async def reserve_output(self, size: int) -> None:
        """Reserve ``size`` bytes of the session's output budget for this call's result,
        waiting (within the call's budget) while the client has not read earlier ones.
        The server releases the reservation once the result has been sent.

        :raise TimeoutError: no room before the call's deadline.
        """
        if self.output_budget is None:
            return
        await self.output_budget.acquire(size, timeout=self.remaining())
        self._reserved.append(size)

    def release_output(self) -> None:
        """Give back every reservation of this call (the server calls this)."""
        if self.output_budget is not None:
            self.output_budget.release(sum(self._reserved))
        self._reserved.clear()

    def remaining(self) -> float:
        """Seconds left until :attr:`deadline` (never negative)."""
        return max(0.0, self.deadline - time.monotonic())

    async def run_in_thread(self, func: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run blocking ``func(*args, **kwargs)`` in a worker thread, off the event loop.

        The thread comes from :func:`~adare_guest.worker_pool.shared_pool`: when the call
        is cancelled the thread is abandoned (a syscall stuck on a hostile guest path
        cannot hold the agent or its exit).

        :raise PoolExhausted: too many worker threads are stuck already.
        """
        return await shared_pool().run(func, *args, **kwargs)


async def _send(send: EmitFunc, event: Event) -> None:
    await send(event)


# --------------------------------------------------------------------------- decorator


@dataclass(frozen=True)
class ToolMarker:
    """What ``@tool`` records on a method."""

    name: str | None
    timeout: float


def tool(*, timeout: float = 60.0, name: str | None = None) -> Callable[[ToolFunc], ToolFunc]:
    """Mark an ``async def NAME(self, ctx, *, ...) -> dict`` method as a tool.

    ``timeout`` is the server-side default in seconds; ``name`` overrides the tool
    name (default: the method name).
    """
    if timeout <= 0:
        raise ValueError(f"tool timeout must be positive, got {timeout}")

    def mark(func: ToolFunc) -> ToolFunc:
        if not inspect.iscoroutinefunction(func):
            raise TypeError(f"@tool needs an async def, {func.__qualname__} is not")
        func.__adare_tool__ = ToolMarker(name, float(timeout))  # type: ignore[attr-defined]
        return func

    return mark


@dataclass
class BoundTool:
    """A tool ready to call: its group's bound method and its parameter specs."""

    name: str
    func: Callable[..., Awaitable[dict[str, Any]]]
    default_timeout: float
    params: dict[str, ParamSpec]
    accepts_any: bool = False
    """The tool takes ``**kwargs``: unknown params are passed through."""

    def validate(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """Check ``params`` against the signature; return them (ints widened to float).

        :raise ParamError: unknown, missing or wrongly typed params (message names them).
        """
        return validate_params(self.name, self.params, self.accepts_any, params)

    def timeout_for(self, params: Mapping[str, Any]) -> tuple[float, float]:
        """(tool budget, server limit) for a call with these validated ``params``."""
        given = params.get("timeout") if "timeout" in self.params else None
        if isinstance(given, (int, float)) and not isinstance(given, bool) and given > 0:
            budget = float(given)
        else:
            budget = self.default_timeout
        return budget, budget + TIMEOUT_GRACE

    def describe(self) -> dict[str, Any]:
        """A JSON-friendly description (name, params, timeout)."""
        return {
            "name": self.name,
            "timeout": self.default_timeout,
            "params": {
                p.name: {"type": describe_type(p.annotation), "required": p.required}
                for p in self.params.values()
            },
        }


class ToolGroup:
    """Base of a tool group; subclasses define ``@tool`` methods."""

    def __init__(self, config: AgentConfig, state: AgentState) -> None:
        self.config = config
        self.state = state

    def tools(self) -> dict[str, BoundTool]:
        """The group's tools by name, bound to this instance."""
        found: dict[str, BoundTool] = {}
        for attr in dir(type(self)):
            func = getattr(type(self), attr, None)
            marker = getattr(func, "__adare_tool__", None)
            if not isinstance(marker, ToolMarker) or func is None:
                continue
            name = marker.name or attr
            found[name] = _bind(name, getattr(self, attr), func, marker)
        return found


def _bind(name: str, method: Any, func: Any, marker: ToolMarker) -> BoundTool:
    params, accepts_any = signature_params(name, func)
    return BoundTool(name, method, marker.timeout, params, accepts_any)
