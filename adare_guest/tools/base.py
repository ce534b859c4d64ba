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

import ast
import asyncio
import inspect
import math
import os
import signal
import subprocess
import sys
import threading
import time
import types
import typing
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar, Union

from adare_guest.backpressure import OutputBudget
from adare_guest.binary_transfer import Transfers
from adare_guest.config import AgentConfig
from adare_guest.protocol import Event, EventType
from adare_guest.worker_pool import shared_pool

TIMEOUT_GRACE = 5.0
"""Seconds the server waits beyond a caller-given ``timeout`` before cancelling."""
MAX_TIMEOUT = 7 * 24 * 3600.0
"""Largest ``timeout`` param a call may give (one week); larger ones are refused."""
INT_PARAM_BITS = 63
"""Integer params must fit a signed 64-bit integer (seek offsets, sizes, modes)."""
CALL_MARKER = "ADARE_CALL_ID"
"""Environment variable carrying the call id into the commands a call starts, so
descendants that left the process tree (``setsid`` + parent exit) can still be found."""

T = TypeVar("T")
ToolFunc = Callable[..., Awaitable[dict[str, Any]]]
EmitFunc = Callable[[Event], Awaitable[None]]
# Evaluated at run time: Union, since the guest's Python 3.9 has no ``X | Y`` of classes.
Process = Union[subprocess.Popen[Any], asyncio.subprocess.Process]


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


class ParamError(ValueError):
    """The params of a tool call do not fit the tool's signature."""


def with_error_key(result: dict[str, Any]) -> dict[str, Any]:
    """``result`` with ``error`` = ``message`` when its status is ``error`` and it has no
    ``error`` key: every tool's error result carries both (the server applies this)."""
    if result.get("status") == "error" and "error" not in result and "message" in result:
        result["error"] = result["message"]
    return result


def kill_process_tree(proc: Process, marker: str | None = None) -> None:
    """Kill ``proc``, its process group and every descendant; safe on an exited process.

    Start ``proc`` in a new session. A descendant that called ``setsid`` left the
    group, so the descendants are also found by walking parent pids in ``/proc``
    (collected *before* anything dies: an orphan is re-parented and lost to the
    walk) and, with ``marker``, by the ``ADARE_CALL_ID=<marker>`` entry of their
    environment (see :data:`CALL_MARKER`).
    """
    if sys.platform == "win32":
        if proc.returncode is None:
            _taskkill(proc)
        return
    strays = descendants(proc.pid) | (marked_processes(marker) if marker else set())
    if proc.returncode is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            try:
                proc.kill()
            except ProcessLookupError:
                pass
    for pid in strays - {os.getpid()}:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _taskkill(proc: Process) -> None:
    try:
        subprocess.run(
            ["taskkill", "/F", "/T", "/PID", str(proc.pid)],
            capture_output=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        pass
    try:
        proc.kill()
    except ProcessLookupError:
        pass


def _proc_files(name: str) -> Iterator[tuple[int, bytes]]:
    """(pid, content of ``/proc/<pid>/<name>``) of every process that can be read."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/{name}", "rb") as handle:
                yield int(entry), handle.read()
        except OSError:
            continue


def descendants(pid: int) -> set[int]:
    """Pids of every living descendant of ``pid`` (by parent-pid chains in ``/proc``)."""
    children: dict[int, list[int]] = {}
    for child, data in _proc_files("stat"):
        # The command name is in parentheses and may itself hold ") ": split at the last.
        fields = data[data.rfind(b")") + 2 :].split()
        if len(fields) > 1:
            children.setdefault(int(fields[1]), []).append(child)
    found: set[int] = set()
    stack = [pid]
    while stack:
        for child in children.get(stack.pop(), ()):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found


def marked_processes(marker: str) -> set[int]:
    """Pids whose environment holds ``ADARE_CALL_ID=<marker>``."""
    needle = f"{CALL_MARKER}={marker}".encode()
    return {pid for pid, data in _proc_files("environ") if needle in data.split(b"\0")}


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


@dataclass(frozen=True)
class ParamSpec:
    """One parameter of a tool."""

    name: str
    annotation: Any
    required: bool


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
        unknown = sorted(set(params) - set(self.params))
        if unknown and not self.accepts_any:
            allowed = ", ".join(self.params) or "none"
            raise ParamError(
                f"unknown param(s) {unknown} for tool {self.name!r} (allowed: {allowed})"
            )
        missing = sorted(
            p.name for p in self.params.values() if p.required and p.name not in params
        )
        if missing:
            raise ParamError(f"missing required param(s) {missing} for tool {self.name!r}")
        checked = dict(params)
        for key, value in params.items():
            spec = self.params.get(key)
            if spec is None:
                continue
            ok, converted = _check(value, spec.annotation)
            if not ok:
                raise ParamError(
                    f"param {key!r} of tool {self.name!r} must be {_describe(spec.annotation)}, "
                    f"got {type(value).__name__} {_short(value)}"
                )
            if key == "timeout" and isinstance(converted, float) and converted > MAX_TIMEOUT:
                raise ParamError(
                    f"param 'timeout' of tool {self.name!r} must be at most {MAX_TIMEOUT:g} s, "
                    f"got {converted:g}"
                )
            checked[key] = converted
        return checked

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
                p.name: {"type": _describe(p.annotation), "required": p.required}
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
    hints = _type_hints(func)
    signature = inspect.signature(func)
    params: dict[str, ParamSpec] = {}
    accepts_any = False
    positional = list(signature.parameters.values())[2:]  # self, ctx
    for param in positional:
        if param.kind is inspect.Parameter.VAR_KEYWORD:
            accepts_any = True
            continue
        if param.kind is inspect.Parameter.VAR_POSITIONAL:
            raise TypeError(f"tool {name!r} must not take *args")
        params[param.name] = ParamSpec(
            param.name, hints.get(param.name, Any), param.default is inspect.Parameter.empty
        )
    return BoundTool(name, method, marker.timeout, params, accepts_any)


_UNION_NAME = "__adare_Union__"
# Not a ``sys.version_info`` test, so that type checkers check the 3.9 path too.
_NATIVE_UNION_OPERATOR = hasattr(types, "UnionType")


def _type_hints(func: Any) -> dict[str, Any]:
    if _NATIVE_UNION_OPERATOR:
        try:
            return typing.get_type_hints(func)
        except NameError:
            pass
    # Some annotation (typically ``ctx``'s, imported under TYPE_CHECKING) does not
    # resolve at runtime, or the Python (3.9) cannot evaluate ``X | Y`` of types:
    # resolve the annotations one by one, unknown ones mean Any.
    hints: dict[str, Any] = {}
    for key, text in getattr(func, "__annotations__", {}).items():
        try:
            hints[key] = evaluate_annotation(text, func.__globals__)
        except Exception:
            hints[key] = Any
    return hints


class _UnionOfBitOr(ast.NodeTransformer):
    """Rewrites ``X | Y`` into ``Union[X, Y]`` (nested ones flatten in ``Union``)."""

    def visit_BinOp(self, node: ast.BinOp) -> ast.expr:
        self.generic_visit(node)
        if not isinstance(node.op, ast.BitOr):
            return node
        union = ast.Name(id=_UNION_NAME, ctx=ast.Load())
        pair = ast.Tuple(elts=[node.left, node.right], ctx=ast.Load())
        return ast.Subscript(value=union, slice=pair, ctx=ast.Load())


def evaluate_annotation(annotation: object, namespace: dict[str, Any]) -> Any:
    """The value of a (string) annotation in ``namespace``, as ``eval`` gives it.

    Python 3.9 cannot evaluate ``X | Y`` of types (PEP 604 came in 3.10), which
    ``from __future__ import annotations`` lets a 3.9 module write: there the ``|``
    operators become ``typing.Union[X, Y]``, which :func:`_check` and
    :func:`_describe` treat like ``X | Y``. A non-string annotation is returned as is.

    :raise Exception: whatever evaluating the annotation raises (e.g. NameError).
    """
    if not isinstance(annotation, str):
        return annotation
    if _NATIVE_UNION_OPERATOR:
        return eval(annotation, namespace)
    tree = _UnionOfBitOr().visit(ast.parse(annotation.strip(), mode="eval"))
    code = compile(ast.fix_missing_locations(tree), "<annotation>", "eval")
    return eval(code, namespace, {_UNION_NAME: Union})


# --------------------------------------------------------------------------- type checks

# ``X | Y`` of types is a ``types.UnionType`` (Python 3.10 and later), ``Union[X, Y]`` a
# ``typing.Union`` (also what :func:`evaluate_annotation` makes of ``X | Y`` on 3.9).
_UNION_ORIGINS = (Union, getattr(types, "UnionType", Union))


def _check(value: Any, annotation: Any) -> tuple[bool, Any]:
    """Does the JSON ``value`` fit ``annotation``? Returns (ok, value widened to float)."""
    if annotation is Any or annotation is object:
        return True, value
    origin = typing.get_origin(annotation)
    if origin in _UNION_ORIGINS:
        for option in typing.get_args(annotation):
            ok, converted = _check(value, option)
            if ok:
                return True, converted
        return False, value
    if origin is Literal:
        return value in typing.get_args(annotation), value
    if annotation is type(None):
        return value is None, value
    if annotation is bool:
        return isinstance(value, bool), value
    if annotation is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
        return ok and value.bit_length() <= INT_PARAM_BITS, value
    if annotation is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            try:
                number = float(value)
            except OverflowError:  # an integer of hundreds of digits
                return False, value
            return math.isfinite(number), number
        return False, value
    if annotation is str:
        return isinstance(value, str), value
    if annotation is list or origin is list:
        if not isinstance(value, list):
            return False, value
        args = typing.get_args(annotation)
        if args:
            checked = [_check(item, args[0]) for item in value]
            if not all(ok for ok, _ in checked):
                return False, value
            return True, [item for _, item in checked]
        return True, value
    if annotation is dict or origin is dict:
        if not isinstance(value, dict):
            return False, value
        args = typing.get_args(annotation)
        if args and not all(_check(v, args[1])[0] for v in value.values()):
            return False, value
        return True, value
    return isinstance(value, annotation) if isinstance(annotation, type) else True, value


def _describe(annotation: Any) -> str:
    if annotation is Any:
        return "any value"
    origin = typing.get_origin(annotation)
    if origin in _UNION_ORIGINS:
        return " or ".join(_describe(a) for a in typing.get_args(annotation))
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(annotation))
    names = {
        bool: "a boolean",
        int: "an integer",
        float: "a number",
        str: "a string",
        list: "a list",
        dict: "an object",
        type(None): "null",
    }
    if origin in (list, dict):
        return names[origin]
    return names.get(annotation, getattr(annotation, "__name__", str(annotation)))


def _short(value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"of {value.bit_length()} bits"
    if isinstance(value, (list, dict)):
        return f"of {len(value)} items"
    text = repr(value[:60] if isinstance(value, str) else value)
    return text if len(text) <= 60 else text[:57] + "..."
