"""The agent server: tool registry, transport-independent sessions, WebSocket front end.

A :class:`Session` is one connected client, whatever carries its bytes: the
WebSocket handler and the serial transport both feed it text with
:meth:`Session.handle_text` and give it a ``send`` coroutine for what goes
back. Every tool call runs as its own task; results echo the call id; bad input
gets an ``error`` event (or ``success=false`` when the id of a ``tool_call`` could
be read) and the session stays usable. :meth:`Session.close` cancels the
session's calls and kills their process groups.

>>> server = AdareVMServer(load_config("/adare/run"))      # doctest: +SKIP
>>> asyncio.run(server.serve())                             # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import sys
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Union

from adare_guest import __version__
from adare_guest.activity import LOOP_BLOCKED, LoopHeartbeat, describe_calls
from adare_guest.backpressure import (
    CALL_ADMISSION_WAIT,
    MAX_CALLS_IN_FLIGHT,
    MAX_PENDING_OUTPUT,
    SEND_TIMEOUT,
    OutputBudget,
    send_deadline,
)
from adare_guest.base64_text import encode_with_base64_text
from adare_guest.binary_transfer import TransferFrameError, Transfers, is_transfer_frame
from adare_guest.config import AgentConfig, listen_host
from adare_guest.identity import agent_identity, bundle_hash
from adare_guest.protocol import (
    MAX_HOST_MESSAGE,
    Connect,
    Event,
    EventType,
    Message,
    MessageType,
    Ping,
    Pong,
    ProtocolError,
    ToolCall,
    ToolResult,
    encode_message,
    is_large_message,
    iter_encode_message,
    parse_message,
)
from adare_guest.repeated_log import RepeatedLog
from adare_guest.tool_params import ParamError
from adare_guest.tools.base import (
    AgentState,
    BoundTool,
    CallContext,
    ToolGroup,
    tool,
    with_error_key,
)
from adare_guest.tools.clock import ClockTools
from adare_guest.tools.files import FileTools
from adare_guest.tools.gui import GuiTools
from adare_guest.tools.session import SessionTools
from adare_guest.tools.system import SystemTools
from adare_guest.tools.terminal import TerminalTools
from adare_guest.tools.testing import TestTools
from adare_guest.websocket.connection import ConnectionClosed, WebSocketConnection
from adare_guest.websocket.frames import CloseCode
from adare_guest.websocket.handshake import HttpResponse, Request
from adare_guest.websocket.server import WebSocketServer
from adare_guest.worker_pool import PoolExhausted, shared_pool

log = logging.getLogger("adare_guest.server")
repeated = RepeatedLog(log)

SendFunc = Callable[[Union[str, bytes]], Awaitable[None]]  # run time: no ``|`` on 3.9
"""Sends one message: ``str`` as JSON text, ``bytes`` as a binary transfer message."""
AbortFunc = Callable[[], None]
GroupFactory = Callable[[AgentConfig, AgentState], ToolGroup]

WEBSOCKET_MAX_SIZE = 4 * MAX_HOST_MESSAGE
"""Messages up to this size are read and answered with an error when > 16 MiB;
larger ones make the WebSocket layer close the connection (1009) before buffering them."""
CLOSE_HANDSHAKE_TIMEOUT = 2.0
"""Seconds a client gets to answer the closing handshake when the agent stops."""
CLOSE_WAIT = 10.0
"""Seconds :meth:`Session.close` waits for cancelled calls to finish."""


def default_groups() -> list[GroupFactory]:
    """The agent's tool groups (``chain_commands`` is added by the server itself)."""
    return [
        SystemTools, FileTools, ClockTools, GuiTools, TestTools, SessionTools, TerminalTools
    ]


async def _exit_is_an_error(call: Awaitable[dict[str, Any]]) -> dict[str, Any]:
    """Await a tool, turning ``SystemExit`` (a library calling ``exit()``) into an error.

    Inside its own task, a ``SystemExit`` would escape asyncio and end the whole agent.
    """
    try:
        return await call
    except SystemExit as exc:
        raise RuntimeError(f"the tool called exit({exc.code!r})") from None


@dataclass(frozen=True)
class CallOutcome:
    """What one bounded tool call gave: the fields of its ``tool_result``."""

    success: bool
    result: Any
    error: str | None
    crash: str | None = None
    """``tool NAME crashed: ...`` when the tool raised (the server's ``last_error``)."""


async def call_bounded(
    bound: BoundTool, ctx: CallContext, params: dict[str, Any], limit: float
) -> CallOutcome:
    """Run ``bound`` with validated ``params``, cancelled after ``limit`` seconds.

    The one path of a call, for a session's calls and ``chain_commands``' steps alike:
    whatever ends it early (its limit, a crash, a cancel) kills the processes it
    started, so neither leaves a command running.

    :raise asyncio.CancelledError: the call was cancelled (its processes are killed).
    """
    try:
        result = await asyncio.wait_for(_exit_is_an_error(bound.func(ctx, **params)), limit)
    except asyncio.TimeoutError:
        ctx.kill_processes()
        return CallOutcome(False, None, f"tool {bound.name!r} timed out after {limit:g} s")
    except asyncio.CancelledError:
        ctx.kill_processes()
        raise
    except Exception as exc:
        ctx.kill_processes()
        log.exception("tool %s crashed", bound.name)
        crash = f"tool {bound.name} crashed: {type(exc).__name__}: {exc}"
        return CallOutcome(False, None, f"{type(exc).__name__}: {exc}", crash)
    if not isinstance(result, dict):
        return CallOutcome(False, None, f"tool {bound.name!r} returned {type(result).__name__}")
    return CallOutcome(True, with_error_key(result), None)


async def _encode_off_loop(msg: Message) -> str:
    """``encode_message(msg)`` in pieces on a worker thread (inline when every worker
    thread is stuck: the result must still go out)."""
    try:
        return await shared_pool().run(lambda: "".join(iter_encode_message(msg)))
    except PoolExhausted:
        return "".join(iter_encode_message(msg))


class ChainTools(ToolGroup):
    """``chain_commands``: run several tool calls in order within one call."""

    def __init__(self, config: AgentConfig, state: AgentState, server: AdareVMServer) -> None:
        super().__init__(config, state)
        self._server = server

    @tool(timeout=600)
    async def chain_commands(
        self,
        ctx: CallContext,
        *,
        commands: list[dict[str, Any]],
        stop_on_error: bool = False,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """Run ``commands`` (``[{tool, params?, id?}]``) one after another.

        Each step's events carry the chain's ``call_id``. A step fails when its
        call fails (``success=false``) or its result says ``status == "error"``;
        with ``stop_on_error`` the chain stops there.
        """
        results: list[dict[str, Any]] = []
        failed = 0
        for index, command in enumerate(commands):
            step = await self._run_step(ctx, index, command)
            results.append(step)
            result = step.get("result")
            ok = step["success"] and not (
                isinstance(result, dict) and result.get("status") == "error"
            )
            failed += not ok
            if not ok and stop_on_error:
                break
        return {
            "status": "error" if failed else "success",
            "message": f"{len(results) - failed} of {len(commands)} commands succeeded",
            "results": results,
        }

    async def _run_step(
        self, ctx: CallContext, index: int, command: Mapping[str, Any]
    ) -> dict[str, Any]:
        step_id = command.get("id") if isinstance(command.get("id"), str) else str(index)
        name = command.get("tool")
        step: dict[str, Any] = {"id": step_id, "tool": name, "success": False, "result": None}
        unknown = set(command) - {"tool", "params", "id"}
        params = command.get("params", {})
        bound = self._server.tools.get(name) if isinstance(name, str) else None
        if unknown or not isinstance(params, dict):
            step["error"] = f"step {index}: keys must be tool, params (object), id"
        elif bound is None or name == "chain_commands":
            step["error"] = f"step {index}: unknown or unchainable tool {name!r}"
        else:
            try:
                checked = bound.validate(params)
            except ParamError as exc:
                step["error"] = str(exc)
                return step
            budget, limit = bound.timeout_for(checked)
            sub = ctx.derive(bound.name, min(budget, ctx.remaining()))
            outcome = await call_bounded(bound, sub, checked, limit)
            if outcome.crash is not None:
                self._server.last_error = outcome.crash
            step.update(success=outcome.success, result=outcome.result, error=outcome.error)
        return step


class AdareVMServer:
    """The agent: a registry of tools from tool groups, sessions, and the WebSocket server.

    ``groups`` are ToolGroup classes (or factories taking ``(config, state)``);
    None means :func:`default_groups`. ``chain_commands`` is always present.
    """

    def __init__(self, config: AgentConfig, groups: Iterable[GroupFactory] | None = None) -> None:
        self.config = config
        self.state = AgentState()
        self.tools: dict[str, BoundTool] = {}
        self.sessions: set[Session] = set()
        self._websocket_sessions: dict[Session, WebSocketConnection] = {}
        self._token = config.token  # to see ``rekey`` (or any tool) replace it
        self.listening = False
        self.listen_address: tuple[str, int] | None = None
        self.last_error: str | None = None
        self.heartbeat = LoopHeartbeat()
        """Beats from :meth:`start` to :meth:`stop`: the health report says how late it is."""
        self._beating: asyncio.Future[None] | None = None
        self.max_calls_in_flight = MAX_CALLS_IN_FLIGHT
        """Tool calls one session may run at once; more wait, then are refused."""
        self.call_admission_wait = CALL_ADMISSION_WAIT
        """Seconds a call over the limit waits for a slot before it is refused."""
        self.max_pending_output = MAX_PENDING_OUTPUT
        """Bytes of big results per session held until the client reads them."""
        self.send_timeout = SEND_TIMEOUT
        """Seconds a client has to take a message (plus its size at 1 MiB/s) before it is
        dropped."""
        self._server: WebSocketServer | None = None
        factories: list[GroupFactory] = list(default_groups() if groups is None else groups)
        instances = [factory(config, self.state) for factory in factories]
        instances.append(ChainTools(config, self.state, self))
        for group in instances:
            for name, bound in group.tools().items():
                if name in self.tools:
                    self.record_error(f"tool {name!r} is defined by two groups; keeping the first")
                    continue
                self.tools[name] = bound
        self.state.tool_names = sorted(self.tools)

    # ------------------------------------------------------------------ info
    def server_info(self) -> dict[str, Any]:
        """The ``server_info`` of the welcome event."""
        host, port = self.listen_address or (self.config.host, self.config.port)
        return {
            "host": host,
            "port": port,
            "available_tools": sorted(self.tools),
            "version": __version__,
            "platform": sys.platform,
        }

    def identity(self) -> dict[str, Any]:
        """The ``client_info`` of our ``connect`` answer."""
        info = dict(agent_identity())
        info["tools"] = sorted(self.tools)
        info["name"] = "adare_guest"
        return info

    def health(self) -> dict[str, Any]:
        """A small health report (serial ``ping`` answer): fits in one 1024-byte frame.

        Called from the serial device thread, also while the event loop is blocked: it
        only reads. ``loop_late`` is how late the loop is for its heartbeat (seconds;
        more than a few: something blocks the loop), ``calls`` the running calls with
        their ages, ``workers`` the blocking-work pool's threads.
        """
        host, port = self.listen_address or (self.config.host, self.config.port)
        last_error = self.last_error
        if last_error is not None and len(last_error) > 300:
            last_error = last_error[:297] + "..."
        late = self.heartbeat.late_by()
        pool = shared_pool()
        blocked = late is not None and late > LOOP_BLOCKED
        return {
            "version": __version__,
            "bundle_hash": bundle_hash(),
            "listen": f"{host}:{port}",
            "listening": self.listening,
            "uptime": round(self.state.uptime(), 3),
            "sessions": len(self.sessions),
            "last_error": last_error,
            "loop_late": None if late is None else round(late, 1),
            "calls": describe_calls(self._running_calls()),
            "workers": f"{pool.busy} busy, {pool.queued} queued, {pool.abandoned} abandoned",
            "loop_at": self.heartbeat.loop_stack() if blocked else None,
        }

    def _running_calls(self) -> list[tuple[str, float]]:
        now = time.monotonic()
        for _attempt in range(3):  # the loop may change the sets meanwhile: read again
            try:
                return [call for s in list(self.sessions) for call in s.call_ages(now)]
            except RuntimeError:
                continue
        return []

    def record_error(self, message: str) -> None:
        """Remember ``message`` as the last error (reported by :meth:`health`)."""
        self.last_error = message
        log.error("%s", message)

    # ------------------------------------------------------------------ sessions
    def open_session(self, send: SendFunc, peer: str, abort: AbortFunc | None = None) -> Session:
        """A new session for a client reachable through ``send``; sends the welcome event.

        ``abort`` drops the client's connection at once; the session calls it when the
        client does not take a message in time (see :mod:`adare_guest.backpressure`).
        """
        session = Session(self, send, peer, abort)
        self.sessions.add(session)
        return session

    # ------------------------------------------------------------------ WebSocket
    def _authorized(self, request: Request | None) -> bool:
        """Whether ``request`` carries the agent's current token (or none is needed)."""
        token = self.config.token
        if not token:
            return True
        if request is None:
            return False
        # Exactly one Authorization header: two are refused like a wrong one. Header
        # values arrive as latin-1, one character per byte: compare the bytes sent.
        supplied = request.headers.get_all("Authorization")
        expected = f"Bearer {token}"
        return len(supplied) == 1 and hmac.compare_digest(
            supplied[0].encode("latin-1"), expected.encode()
        )

    def _process_request(self, request: Request, remote_address: Any) -> HttpResponse | None:
        if self._authorized(request):
            return None
        # Rate-limited: a flood of bad handshakes must not fill the guest's disk.
        repeated.warning(
            "bad token", "rejected connection from %s: bad or missing token", _peer(remote_address)
        )
        return HttpResponse.text(
            401, "missing or wrong bearer token", [("WWW-Authenticate", "Bearer")]
        )

    async def _handle_connection(self, connection: WebSocketConnection) -> None:
        peer = _peer(connection.remote_address)
        if not self._authorized(connection.request):  # rekeyed since its handshake
            log.warning("closing %s at once: its token was replaced", peer)
            await connection.close(CloseCode.POLICY_VIOLATION, "token replaced")
            return
        log.info("client connected: %s", peer)
        session = self.open_session(connection.send, peer, connection.abort)
        self._websocket_sessions[session] = connection
        try:
            async for message in connection:
                await session.handle_text(message)
        finally:
            self._websocket_sessions.pop(session, None)
            await session.close()
            log.info("client disconnected: %s", peer)

    def token_changed(self, keep: Session) -> None:
        """The agent's token was replaced from ``keep``: end every other WebSocket session
        that logged in with a token that is no longer valid (closed with 1008, its calls
        cancelled and their processes killed), so a saved token stops working at once."""
        for session, connection in list(self._websocket_sessions.items()):
            if session is keep or self._authorized(connection.request):
                continue
            log.warning("closing the session of %s: its token was replaced", session.peer)
            connection.start_close(CloseCode.POLICY_VIOLATION, "token replaced")
            session.end()

    async def start(self) -> tuple[str, int]:
        """Bind the WebSocket server; return the bound (host, port).

        :raise OSError: the address cannot be bound (also kept as ``last_error``).
        """
        if self._beating is None:  # from the first attempt on, bound or not
            self._beating = asyncio.ensure_future(self.heartbeat.run())
        host, warning = listen_host(self.config)
        if warning:
            log.warning("%s", warning)
        server = WebSocketServer(
            self._handle_connection,
            process_request=self._process_request,
            max_size=WEBSOCKET_MAX_SIZE,
            # A bigger text is refused by size anyway: not worth its str (4 bytes a char).
            max_text=MAX_HOST_MESSAGE,
            ping_interval=20,
            ping_timeout=20,
            # A client that does not answer our close must not hold a SIGTERM'd agent.
            close_timeout=CLOSE_HANDSHAKE_TIMEOUT,
        )
        try:
            await server.listen(host, self.config.port)
        except OSError as exc:
            self.record_error(f"cannot listen on {host}:{self.config.port}: {exc}")
            raise
        self._server = server
        sockname = next(iter(self._server.sockets)).getsockname()
        self.listen_address = (host, int(sockname[1]))
        self.listening = True
        log.info("listening on %s:%d", *self.listen_address)
        return self.listen_address

    async def stop(self) -> None:
        """Stop listening and close every session."""
        server, self._server = self._server, None
        self.listening = False
        if self._beating is not None:
            self._beating.cancel()
            self._beating = None
        if server is not None:
            server.close()
            try:
                await asyncio.wait_for(
                    asyncio.shield(server.wait_closed()), CLOSE_HANDSHAKE_TIMEOUT + 1
                )
            except asyncio.TimeoutError:
                # Every connection is cut off after CLOSE_HANDSHAKE_TIMEOUT; a handler
                # still running is a session whose calls are slow to stop.
                for session in list(self.sessions):
                    session.abort()
                await asyncio.wait_for(server.wait_closed(), CLOSE_WAIT)
        for session in list(self.sessions):
            await session.close()

    async def serve(self, *, retry_bind: float | None = None) -> None:
        """Listen until cancelled. With ``retry_bind`` (seconds), a failed bind is retried
        at that interval instead of raising (the serial link keeps working meanwhile)."""
        while True:
            try:
                await self.start()
                break
            except OSError:
                if retry_bind is None:
                    raise
                await asyncio.sleep(retry_bind)
        try:
            assert self._server is not None
            # Until stop() or cancellation; stop() bounds the closing of connections.
            await self._server.wait_closed()
        finally:
            await self.stop()


def _peer(address: Any) -> str:
    if isinstance(address, tuple) and len(address) >= 2:
        return f"{address[0]}:{address[1]}"
    return str(address)


class Session:
    """One client: parses its messages, runs its calls, sends answers through ``send``."""

    def __init__(
        self, server: AdareVMServer, send: SendFunc, peer: str, abort: AbortFunc | None = None
    ) -> None:
        self.server = server
        self.peer = peer
        self.closed = False
        self.dropped: str | None = None
        """Why the session dropped its client (it did not read), else None."""
        self._send_raw = send
        self._abort = abort
        self._send_lock = asyncio.Lock()
        self._calls: dict[str, tuple[asyncio.Task[None], CallContext]] = {}
        self._call_ended = asyncio.Event()
        self.output_budget = OutputBudget(server.max_pending_output)
        self.transfers = Transfers(self._send_text)
        """Binary file transfers (docs/agent.md "Binary transfer")."""
        self._welcome: str | None = encode_message(
            Event(
                EventType.LOG,
                {"message": "Connected to AdareVM server", "server_info": server.server_info()},
            )
        )
        loop = asyncio.get_running_loop()
        self._welcome_task = loop.create_task(self._send_text(None))
        self._closing: asyncio.Task[None] | None = None

    @property
    def running_calls(self) -> list[str]:
        """Ids of the calls still running."""
        return list(self._calls)

    def call_ages(self, now: float) -> list[tuple[str, float]]:
        """``(tool, seconds running)`` of each running call (``now``: monotonic)."""
        return [(ctx.tool, now - (ctx.deadline - ctx.timeout)) for _t, ctx in self._calls.values()]

    async def _send_text(self, text: str | bytes | None) -> None:
        async with self._send_lock:
            if self.closed:
                return
            try:
                if self._welcome is not None:
                    welcome, self._welcome = self._welcome, None
                    await self._send_bounded(welcome)
                if text is not None:
                    await self._send_bounded(text)
            except ConnectionClosed:
                self.closed = True
            except TimeoutError as exc:
                self._drop(str(exc))
            except Exception as exc:
                self.server.record_error(f"send to {self.peer} failed: {exc}")

    async def _send_bounded(self, text: str | bytes) -> None:
        """Send ``text`` or raise TimeoutError when the client does not take it in time."""
        limit = send_deadline(len(text), self.server.send_timeout)
        try:
            await asyncio.wait_for(self._send_raw(text), limit)
        except asyncio.TimeoutError:
            raise TimeoutError(
                f"client {self.peer} did not take a {len(text)}-byte message within "
                f"{limit:.0f} s; dropping it"
            ) from None

    def abort(self) -> None:
        """Cut the client's connection at once (no closing handshake), if the transport
        gave a way to; the transport's read loop then ends and closes the session."""
        if self._abort is not None:
            self._abort()

    def _drop(self, reason: str) -> None:
        """Give up on a client that does not read: close its connection, cancel its calls."""
        if self.closed:
            return
        self.dropped = reason
        self.server.record_error(reason)
        self.abort()
        self.end()

    def end(self) -> None:
        """Stop handling this client's messages now and close the session (in a task)."""
        if self._closing is None:
            self.closed = True
            self._closing = asyncio.get_running_loop().create_task(self.close())

    async def send(self, msg: Message) -> None:
        """Encode and send ``msg`` (dropped silently once the session is closed).

        Base64 file chunks are spliced in as they are (no JSON escaping scan); other
        big results (snapshots) are encoded piecewise in a worker thread so the event
        loop keeps answering other calls meanwhile.
        """
        try:
            if is_large_message(msg):
                spliced = encode_with_base64_text(msg)
                text = spliced if spliced is not None else await _encode_off_loop(msg)
            else:
                text = encode_message(msg)
        except (TypeError, ValueError, RecursionError, OverflowError) as exc:
            if not isinstance(msg, ToolResult):
                raise
            text = encode_message(
                ToolResult(
                    msg.id, False, None, f"result is not JSON-serialisable: {type(exc).__name__}"
                )
            )
        await self._send_text(text)

    async def handle_text(self, text: str | bytes) -> None:
        """Handle one incoming message; never raises for bad input (nor for our own bugs:
        whatever goes wrong with one message is answered and logged, the session stays)."""
        if self.closed:
            return
        if isinstance(text, bytes) and is_transfer_frame(text):
            await self.handle_binary(text)
            return
        try:
            msg = parse_message(text, max_size=MAX_HOST_MESSAGE)
        except ProtocolError as exc:
            await self._reject(exc)
            return
        except Exception as exc:  # a parser failure we did not foresee: still one message
            log.exception("cannot parse a message from %s", self.peer)
            await self._reject(ProtocolError(f"cannot parse message: {type(exc).__name__}"))
            return
        try:
            await self._dispatch(msg)
        except Exception as exc:
            log.exception("handling a %s message from %s failed", msg.type.value, self.peer)
            reason = f"internal error handling the message: {type(exc).__name__}: {exc}"
            if isinstance(msg, ToolCall):
                await self.send(ToolResult(msg.id, False, None, reason))
            else:
                await self.send(Event(EventType.ERROR, {"message": reason, "id": msg.id}))

    async def handle_binary(self, data: bytes) -> None:
        """Handle one binary transfer message; never raises for bad input."""
        if self.closed:
            return
        try:
            await self.transfers.receive(data)
        except TransferFrameError as exc:
            log.warning("bad binary message from %s: %s", self.peer, exc)
            await self.send(Event(EventType.ERROR, {"message": str(exc), "id": None}))
        except Exception as exc:
            log.exception("handling a binary message from %s failed", self.peer)
            self.server.record_error(f"binary message: {type(exc).__name__}: {exc}"[:300])

    async def _dispatch(self, msg: Message) -> None:
        if isinstance(msg, ToolCall):
            await self._start_call(msg)
        elif isinstance(msg, Ping):
            await self.send(Pong(id=msg.id))
        elif isinstance(msg, Connect):
            await self.send(Connect(self.server.identity(), id=msg.id))
        elif isinstance(msg, Pong):
            return
        else:
            await self.send(
                Event(
                    EventType.ERROR,
                    {
                        "message": f"unexpected {msg.type.value} message from the client",
                        "id": msg.id,
                    },
                )
            )

    async def _reject(self, exc: ProtocolError) -> None:
        log.warning("bad message from %s: %s", self.peer, exc.reason)
        if exc.message_type == MessageType.TOOL_CALL.value and exc.message_id:
            await self.send(ToolResult(exc.message_id, False, None, exc.reason))
        else:
            await self.send(Event(EventType.ERROR, {"message": exc.reason, "id": exc.message_id}))

    async def _start_call(self, call: ToolCall) -> None:
        bound = self.server.tools.get(call.tool)
        if bound is None:
            await self.send(ToolResult(call.id, False, None, f"unknown tool {call.tool!r}"))
            return
        if call.id in self._calls:
            await self.send(
                ToolResult(call.id, False, None, f"a call with id {call.id!r} is still running")
            )
            return
        if not await self._wait_for_slot():
            await self.send(
                ToolResult(
                    call.id,
                    False,
                    None,
                    f"too many calls in flight: {len(self._calls)} are running "
                    f"(limit {self.server.max_calls_in_flight} per session) and none ended "
                    f"within {self.server.call_admission_wait:g} s",
                )
            )
            return
        try:
            params = bound.validate(call.params)
        except ParamError as exc:
            await self.send(ToolResult(call.id, False, None, str(exc)))
            return
        budget, limit = bound.timeout_for(params)
        ctx = CallContext(
            call_id=call.id,
            tool=bound.name,
            timeout=budget,
            config=self.server.config,
            state=self.server.state,
            emit=self.send,
            loop=asyncio.get_running_loop(),
            output_budget=self.output_budget,
            transfers=self.transfers,
        )
        task = asyncio.get_running_loop().create_task(
            self._run_call(ctx, self._call_reply(call, bound, params, ctx, limit))
        )
        self._calls[call.id] = (task, ctx)
        task.add_done_callback(lambda _t: self._call_done(call.id))

    def _call_done(self, call_id: str) -> None:
        self._calls.pop(call_id, None)
        self._call_ended.set()

    async def _wait_for_slot(self) -> bool:
        """Wait (bounded) until fewer than ``max_calls_in_flight`` calls run; False when
        none ended in time. The caller reads no further message meanwhile."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.server.call_admission_wait
        while len(self._calls) >= self.server.max_calls_in_flight:
            self._call_ended.clear()
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            try:
                await asyncio.wait_for(self._call_ended.wait(), remaining)
            except asyncio.TimeoutError:
                return False
        return not self.closed

    def _check_token(self) -> None:
        """A call may have replaced the agent's token (``rekey``): tell the server."""
        server = self.server
        if server.config.token != server._token:
            server._token = server.config.token
            server.token_changed(self)

    async def _run_call(self, ctx: CallContext, reply: Awaitable[ToolResult]) -> None:
        """Send the call's reply; then its output reservations are free again."""
        try:
            await self.send(await reply)
        finally:
            ctx.release_output()

    async def _call_reply(
        self,
        call: ToolCall,
        bound: BoundTool,
        params: dict[str, Any],
        ctx: CallContext,
        limit: float,
    ) -> ToolResult:
        started = time.monotonic()
        # One INFO line per call, when it is done (a running call is in the health
        # report): two lines cost a measurable share of a round trip.
        log.debug("call %s %s params=%s", call.id, bound.name, sorted(params))
        try:
            outcome = await call_bounded(bound, ctx, params, limit)
        finally:
            self._check_token()
        if outcome.crash is not None:
            self.server.last_error = outcome.crash
        reply = ToolResult(call.id, outcome.success, outcome.result, outcome.error)
        log.info(
            "done %s %s success=%s in %.3f s",
            call.id,
            bound.name,
            reply.success,
            time.monotonic() - started,
        )
        return reply

    async def close(self) -> None:
        """Cancel running calls, kill their processes, stop sending. Idempotent."""
        self.closed = True
        self.server.sessions.discard(self)
        self._welcome_task.cancel()
        await self.transfers.close()
        calls = list(self._calls.values())
        for task, ctx in calls:
            ctx.kill_processes()
            task.cancel()
        tasks = [task for task, _ in calls if task is not asyncio.current_task()]
        if tasks:
            _done, pending = await asyncio.wait(tasks, timeout=CLOSE_WAIT)
            if pending:
                log.warning("%d calls did not stop within %.0f s", len(pending), CLOSE_WAIT)
