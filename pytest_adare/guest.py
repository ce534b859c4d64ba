"""The Guest facade (DESIGN §5): the test's vocabulary over one ``call()`` primitive.

:class:`AsyncGuest` is the core; :class:`Guest` runs each of its coroutines on the
process-wide loop thread (:func:`pytest_adare.loop_thread.shared_loop`), so the two
can never disagree::

    r = guest.shell("echo hi; exit 3")          # sync, any thread
    r = await guest.aio.shell("echo hi; exit 3")  # async twin, on the shared loop

Transports only implement :class:`pytest_adare.agent.connection.AgentConnection`.
Screenshots, pointer and keyboard go to one :class:`Screen`: the agent's GUI tools
(:class:`~pytest_adare.agent.screen.AgentScreen`, the default) or QEMU's screendump
and input (:class:`~pytest_adare.machine_tools.screen.QemuScreen`, ``gui="host"``); the facade
itself never asks which. File transfer is :mod:`pytest_adare.agent.transfer`.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import json
import os
import re
import shlex
import time
import weakref
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar, overload

from PIL import Image

from adare_guest.tool_names import (
    EXECUTE_SHELL,
    GET_FILESYSTEM_SNAPSHOT,
    GET_TIMESTAMP,
    IDLE,
    INSTALL_DEPENDENCIES,
    LIST_WINDOWS,
    RUN_TEST,
    SET_VARIABLES,
    UPLOAD_TESTFUNCTIONS,
)
from pytest_adare.agent.connection import AgentConnection, EventCallback
from pytest_adare.agent.screen import AgentScreen
from pytest_adare.agent.testfunction_upload import zip_collection
from pytest_adare.agent.transfer import (
    DEFAULT_PULL_MAX_BYTES,
    ProgressCallback,
    binary_transport,
    pull_file,
    push_file,
)
from pytest_adare.errors import (
    AdareError,
    CommandSucceeded,
    GuestCommandFailed,
    ToolError,
)
from pytest_adare.forensics.diff import FsDiff
from pytest_adare.forensics.entry import number_or_none
from pytest_adare.forensics.evidence import DEFAULT_MAX_BYTES, pull_changed
from pytest_adare.forensics.snapshot import FsSnapshot, SnapshotPages
from pytest_adare.guest_journal import (
    DEFAULT_LIMIT as JOURNAL_LIMIT,
)
from pytest_adare.guest_journal import (
    NO_SYSTEMD,
    JournalEntry,
    journal_command,
    output_budget,
    parse_journal,
)
from pytest_adare.guest_user import AsyncGuestUser, GuestUser
from pytest_adare.guest_waits import (
    DEFAULT_WAIT,
    LISTENING_TCP_COMMAND,
    MIN_CHECK_BUDGET,
    Window,
    check_port,
    host_tcp_answer,
    listening_tcp_ports,
    output_tail,
    poll_until,
    windows_from_result,
)
from pytest_adare.loop_thread import SyncTwin, shared_loop, sync_context_twin, sync_twin
from pytest_adare.machine_tools.port_forward import PortForwardError, PortForwards
from pytest_adare.screen.match import (
    Box,
    Region,
    Template,
    matcher_for,
    wait_for_image,
    wait_for_image_gone,
)
from pytest_adare.screen.text import (
    Pattern,
    TextMatch,
    TextQuery,
    find_text,
    read_screen_text,
    wait_for_text,
    wait_for_text_gone,
)

if TYPE_CHECKING:
    from pytest_adare.playbook.results import PlaybookResult

T = TypeVar("T")


@dataclass(frozen=True)
class ShellResult:
    """What ``guest.shell()`` returns; ``.check()`` raises when ``returncode != 0``.

    ``stdout``/``stderr`` are text (output that is not UTF-8 is shown with replacement
    characters); ``stdout_raw``/``stderr_raw`` are the bytes exactly as the command
    wrote them (the agent carries non-UTF-8 output as base64, losslessly). The agent
    keeps at most ``max_output_bytes`` of each stream: ``stdout_truncated`` says the
    rest was dropped and ``stdout_total`` counts every byte the command wrote.
    """

    returncode: int
    stdout: str
    stderr: str
    command: str
    stdout_raw: bytes = b""
    stderr_raw: bytes = b""
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    stdout_total: int = -1
    stderr_total: int = -1
    pid: int | None = None
    """``shell(..., background=True)``: the started program's pid (it runs on; returncode 0
    says only that it started), with its output in ``stdout_path`` and ``stderr_path``."""
    stdout_path: str | None = None
    stderr_path: str | None = None

    def __post_init__(self) -> None:
        # Built by hand from text only: the bytes and counts follow from the text.
        for name in ("stdout", "stderr"):
            text: str = getattr(self, name)
            if not getattr(self, f"{name}_raw") and text:
                object.__setattr__(self, f"{name}_raw", text.encode("utf-8", "surrogatepass"))
            if getattr(self, f"{name}_total") < 0:
                object.__setattr__(self, f"{name}_total", len(getattr(self, f"{name}_raw")))

    @classmethod
    def from_result(cls, command: str, result: Mapping[str, Any]) -> ShellResult:
        """Read an ``execute_shell`` result; the guest is not trusted to send one.

        :raise ToolError: no integer ``returncode`` (the command did not run to its end:
            the agent's message says why), or a field of the wrong type or an
            inconsistent one (invalid base64, a count below the bytes sent).
        """
        pid = result.get("pid")
        if "stdout_path" in result and result.get("returncode") is None:
            if type(pid) is not int or pid <= 0:
                raise ToolError(EXECUTE_SHELL, f"{command!r}: no pid", dict(result))
            paths = [result.get(f"{name}_path") for name in ("stdout", "stderr")]
            if not all(isinstance(path, str) for path in paths):
                raise ToolError(EXECUTE_SHELL, f"{command!r}: no output paths", dict(result))
            return cls(0, "", "", command, pid=pid, stdout_path=paths[0], stderr_path=paths[1])
        returncode = result.get("returncode")
        if type(returncode) is not int:
            message = result.get("message", "no return code")
            raise ToolError(EXECUTE_SHELL, f"{command!r}: {message}", dict(result))
        out = _stream(command, result, "stdout")
        err = _stream(command, result, "stderr")
        return cls(returncode, out[0], err[0], command, out[1], err[1], out[2], err[2],
                   out[3], err[3])  # fmt: skip

    def check(self) -> ShellResult:
        """Return self when the command succeeded, else raise :class:`GuestCommandFailed`."""
        if self.returncode != 0:
            raise GuestCommandFailed(self)
        return self

    @property
    def ok(self) -> bool:
        """True when the command exited 0."""
        return self.returncode == 0

    @property
    def truncated(self) -> bool:
        """True when the agent dropped output of either stream (above ``max_output_bytes``)."""
        return self.stdout_truncated or self.stderr_truncated


def _stream(command: str, result: Mapping[str, Any], name: str) -> tuple[str, bytes, bool, int]:
    """(text, raw bytes, truncated, total bytes) of one output stream of a shell result."""

    def malformed(why: str) -> ToolError:
        return ToolError(EXECUTE_SHELL, f"{command!r}: malformed result: {why}", dict(result))

    text, encoded = result.get(name, ""), result.get(f"{name}_base64")
    truncated, total = result.get(f"{name}_truncated", False), result.get(f"{name}_bytes")
    if not isinstance(text, str):
        raise malformed(f"{name} is {type(text).__name__}, not text")
    if type(truncated) is not bool:
        raise malformed(f"{name}_truncated is {type(truncated).__name__}, not a boolean")
    if encoded is None:
        raw = text.encode("utf-8", "surrogatepass")
    else:
        if not isinstance(encoded, str) or text:
            raise malformed(f"{name}_base64 must be base64 text with {name} empty")
        try:
            raw = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            raise malformed(f"{name}_base64 is not valid base64") from None
        text = raw.decode("utf-8", "replace")
    if total is None:
        total = len(raw)
    if type(total) is not int or total < len(raw):
        raise malformed(f"{name}_bytes={total!r} does not count the {len(raw)} bytes sent")
    return text, raw, truncated, total


@dataclass(frozen=True)
class TestOutcome:
    """The verdict of a guest test function: status SUCCESS|FAILED|ERROR|WARNING|UNKNOWN."""

    __test__ = False  # not a pytest test class

    status: str
    details: list[str]

    @property
    def passed(self) -> bool:
        """True when the status is SUCCESS."""
        return self.status == "SUCCESS"


@dataclass
class FsWatch:
    """Filled by :meth:`AsyncGuest.watch_fs`: ``before``, then ``after`` and ``diff`` on exit."""

    root: str
    before: FsSnapshot
    after: FsSnapshot | None = None
    diff: FsDiff | None = None


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


class AsyncKeyboard:
    """``guest.aio.keyboard``: ``type`` text, ``press`` one key, ``hotkey`` a chord."""

    def __init__(self, guest: AsyncGuest) -> None:
        self._guest = guest

    async def type(self, text: str) -> None:
        """Type ``text`` as keystrokes."""
        await self._guest.on_home_loop(self._guest.screen.type_text(text))

    async def press(self, key: str) -> None:
        """Press and release one key, e.g. ``"enter"``."""
        await self._guest.on_home_loop(self._guest.screen.press(key))

    async def hotkey(self, *keys: str) -> None:
        """Press ``keys`` together, e.g. ``hotkey("ctrl", "c")``."""
        if not keys:
            raise ValueError("hotkey() needs at least one key")
        await self._guest.on_home_loop(self._guest.screen.hotkey(keys))


class AsyncGuest:
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
        self.events = EventHub()
        self.agent_root = agent_root
        """Where the agent and the plugin write in the guest (its run dir), if known;
        :meth:`fs_snapshot` leaves it out unless ``include_agent=True``."""
        self.user: AsyncGuestUser[ShellResult] = AsyncGuestUser(self.shell, user)
        """The person at the keyboard (``user``: the image's, else the desktop session's,
        else root); see :mod:`pytest_adare.guest_user`."""
        self.keyboard = AsyncKeyboard(self)
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

    # -- commands ---------------------------------------------------------------------

    async def shell(
        self,
        command: str,
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
        admin: bool = False,
        run_as_user: str | None = None,
        max_output_bytes: int | None = None,
        background: bool = False,
    ) -> ShellResult:
        """Run ``command`` in the guest's shell and return rc, stdout and stderr.

        A non-zero exit is not an error here: call ``.check()`` for that.
        ``background=True`` starts it detached and returns at once: ``.pid``, and its
        output goes to the files ``.stdout_path`` / ``.stderr_path`` in the guest.
        ``max_output_bytes`` caps what the agent keeps of each stream (its default:
        16 MiB; at most 64 MiB); the rest is counted, and ``.truncated`` says so.

        :raise ToolError: the command could not run at all (or timed out without a
            code), or the agent's result is malformed.
        """
        params: dict[str, Any] = {"shell_command": command}
        if cwd is not None:
            params["cwd"] = cwd
        if env is not None:
            params["env"] = dict(env)
        if timeout is not None:
            params["timeout"] = timeout
        if admin:
            params["admin"] = True
        if run_as_user is not None:
            params["run_as_user"] = run_as_user
        if max_output_bytes is not None:
            params["max_output_bytes"] = max_output_bytes
        if background:
            params["background"] = True
        # The connection's call, not self.call: ``timeout`` is the tool's param here (the
        # agent ends the command and answers; the host waits that long plus a grace).
        result = await self.on_home_loop(self._connection.call(EXECUTE_SHELL, params, None))
        return ShellResult.from_result(command, result)

    # -- files ------------------------------------------------------------------------

    async def pull(
        self,
        guest_path: str,
        host_path: str | os.PathLike[str],
        *,
        progress: ProgressCallback | None = None,
        chunk_size: int | None = None,
        max_bytes: int = DEFAULT_PULL_MAX_BYTES,
        timeout: float | None = None,
    ) -> Path:
        """Copy a guest file to ``host_path``: chunked, sha256-verified, atomic on the host.

        Binary messages carry the bytes when the agent offers them, else JSON chunks;
        ``chunk_size`` defaults to the path's own (1 MiB binary, 2 MiB JSON). A file
        the guest announces above ``max_bytes`` (default 4 GiB) is refused before a
        byte is written; the pull ends after ``timeout`` seconds (default 120 s plus
        the size at 256 KiB/s). Nothing of a failed pull stays on the host.

        :raise ToolError: the guest file cannot be read, is a directory, is above
            ``max_bytes``, or the hash differs.
        :raise VMTimeout: the pull did not finish in time.
        """
        binary = binary_transport(self._connection)
        return await self.on_home_loop(
            pull_file(
                self._checked, guest_path, host_path, progress=progress,
                chunk_size=chunk_size, binary=binary, max_bytes=max_bytes, timeout=timeout,
            )
        )  # fmt: skip

    async def push(
        self,
        host_path: str | os.PathLike[str],
        guest_path: str,
        *,
        mode: int | None = None,
        progress: ProgressCallback | None = None,
        chunk_size: int | None = None,
    ) -> None:
        """Copy a host file to ``guest_path`` (chunked; the agent verifies sha256, renames).

        Binary messages carry the bytes when the agent offers them, else JSON chunks;
        ``chunk_size`` defaults to the path's own (1 MiB binary, 4 MiB JSON).

        :raise FileNotFoundError: ``host_path`` does not exist.
        :raise ToolError: the agent refused a chunk or the hash differed.
        """
        binary = binary_transport(self._connection)
        await self.on_home_loop(
            push_file(
                self._checked, host_path, guest_path, mode=mode, progress=progress,
                chunk_size=chunk_size, binary=binary,
            )
        )  # fmt: skip

    # -- GUI --------------------------------------------------------------------------

    async def screenshot(self) -> Image.Image:
        """The guest's screen as a PIL image (agent, or QMP screendump with ``gui="host"``)."""
        return await self.on_home_loop(self.screen.screenshot())

    async def click(self, x: int, y: int) -> None:
        """Left click at screen pixel (x, y)."""
        await self.on_home_loop(self.screen.click(x, y, "left", 1))

    async def double_click(self, x: int, y: int) -> None:
        """Double click at (x, y)."""
        await self.on_home_loop(self.screen.click(x, y, "left", 2))

    async def right_click(self, x: int, y: int) -> None:
        """Right click at (x, y)."""
        await self.on_home_loop(self.screen.click(x, y, "right", 1))

    async def goto(self, x: int, y: int) -> None:
        """Move the pointer to (x, y)."""
        await self.on_home_loop(self.screen.move(x, y))

    async def drag(self, x1: int, y1: int, x2: int, y2: int) -> None:
        """Press at (x1, y1), move to (x2, y2), release."""
        await self.on_home_loop(self.screen.drag(x1, y1, x2, y2))

    async def scroll(self, direction: str = "down", amount: int = 3) -> None:
        """Scroll ``amount`` steps ``up``, ``down``, ``left`` or ``right``."""
        if direction not in ("up", "down", "left", "right"):
            raise ValueError(f"scroll direction must be up/down/left/right, got {direction!r}")
        await self.on_home_loop(self.screen.scroll(direction, amount))

    @overload
    async def wait_for_image(
        self,
        template: Template,
        timeout: float = ...,
        region: Region | None = ...,
        threshold: float | None = ...,
        *,
        gone: Literal[False] = ...,
        index: int = ...,
        near: tuple[int, int] | None = ...,
    ) -> Box: ...
    @overload
    async def wait_for_image(
        self,
        template: Template,
        timeout: float = ...,
        region: Region | None = ...,
        threshold: float | None = ...,
        *,
        gone: Literal[True],
        index: int = ...,
        near: tuple[int, int] | None = ...,
    ) -> None: ...
    async def wait_for_image(
        self,
        template: Template,
        timeout: float = 10.0,
        region: Region | None = None,
        threshold: float | None = None,
        *,
        gone: bool = False,
        index: int = 1,
        near: tuple[int, int] | None = None,
    ) -> Box | None:
        """Take screenshots until ``template`` shows; its :class:`Box` on the screen.

        ``template``: an image, a PNG path (with its needle sidecar, if any) or a
        :class:`~pytest_adare.screen.match.Needle`; ``threshold`` defaults to the
        needle's, else 0.9. GUI events of the agent wake the matcher early (see
        :mod:`pytest_adare.screen.match`). ``index`` picks the n-th match in reading
        order, ``near=(x, y)`` the closest one; ``gone=True`` waits until the template
        is no longer on the screen (returns None).

        :raise ImageNotFound: after ``timeout`` s, naming the best score and a saved screenshot.
        :raise ImageStillShown: with ``gone=True``, it was still there after ``timeout`` s.
        """
        if gone:
            await wait_for_image_gone(
                self.screenshot, template, timeout, region, threshold, events=self.events
            )
            return None
        return await wait_for_image(
            self.screenshot, template, timeout, region, threshold, events=self.events,
            index=index, near=near,
        )  # fmt: skip

    async def click_image(
        self,
        template: Template,
        timeout: float = 10.0,
        region: Region | None = None,
        threshold: float | None = None,
        *,
        button: MouseButton = "left",
        clicks: int = 1,
        index: int = 1,
        near: tuple[int, int] | None = None,
    ) -> Box:
        """Wait for ``template`` like :meth:`wait_for_image`, then click it (its centre, or
        the needle's click point) with ``button``, ``clicks`` times (2: a double click);
        returns where it was found."""
        check_click(button, clicks)
        matcher = matcher_for(template)
        box = await self.wait_for_image(matcher, timeout, region, threshold, index=index, near=near)
        dx, dy = matcher.click_offset
        await self.on_home_loop(self.screen.click(box.x + dx, box.y + dy, button, clicks))
        return box

    async def screen_text(self, region: Region | None = None) -> str:
        """The text read on the screen (or in ``region`` = x, y, width, height) by OCR on
        the host (see :mod:`pytest_adare.screen.text`).

        :raise OcrUnavailable: tesserocr or tesseract's English data is missing.
        """
        return await asyncio.to_thread(read_screen_text, await self.screenshot(), region)

    async def find_text(
        self,
        pattern: Pattern,
        region: Region | None = None,
        *,
        ignore_case: bool = False,
        max_distance: int = 0,
    ) -> list[TextMatch]:
        """Every place ``pattern`` (literal text or a compiled regex) is read on the
        screen now, in reading order (top to bottom, then left to right), each with its
        box and confidence; empty when nowhere. ``max_distance`` allows that many
        edits in literal text (OCR misreads)."""
        query = TextQuery(pattern, ignore_case, max_distance)
        return await asyncio.to_thread(find_text, query, await self.screenshot(), region)

    @overload
    async def wait_for_text(
        self,
        pattern: Pattern,
        timeout: float = ...,
        region: Region | None = ...,
        *,
        gone: Literal[False] = ...,
        index: int = ...,
        near: tuple[int, int] | None = ...,
        ignore_case: bool = ...,
        max_distance: int = ...,
    ) -> TextMatch: ...
    @overload
    async def wait_for_text(
        self,
        pattern: Pattern,
        timeout: float = ...,
        region: Region | None = ...,
        *,
        gone: Literal[True],
        index: int = ...,
        near: tuple[int, int] | None = ...,
        ignore_case: bool = ...,
        max_distance: int = ...,
    ) -> None: ...
    async def wait_for_text(
        self,
        pattern: Pattern,
        timeout: float = 10.0,
        region: Region | None = None,
        *,
        gone: bool = False,
        index: int = 1,
        near: tuple[int, int] | None = None,
        ignore_case: bool = False,
        max_distance: int = 0,
    ) -> TextMatch | None:
        """Read the screen until ``pattern`` shows (re-read when the screen changes,
        woken early by the agent's GUI events); the first match in reading order, the
        ``index``-th, or the one closest to ``near=(x, y)``. ``gone=True`` waits until
        it is read nowhere (returns None).

        :raise TextNotFound: after ``timeout`` s, with the last screenshot and its text.
        :raise TextStillShown: with ``gone=True``, it was still there after ``timeout`` s.
        """
        query = TextQuery(pattern, ignore_case, max_distance)
        if gone:
            await wait_for_text_gone(self.screenshot, query, timeout, region, self.events)
            return None
        return await wait_for_text(
            self.screenshot, query, timeout, region, self.events, index=index, near=near
        )

    async def click_text(
        self,
        pattern: Pattern,
        timeout: float = 10.0,
        region: Region | None = None,
        *,
        button: MouseButton = "left",
        clicks: int = 1,
        index: int = 1,
        near: tuple[int, int] | None = None,
        ignore_case: bool = False,
        max_distance: int = 0,
    ) -> TextMatch:
        """Wait for ``pattern`` like :meth:`wait_for_text`, then click the centre of the
        matched text with ``button`` (``left``, ``right``, ``middle``), ``clicks`` times
        (2: a double click); returns the match."""
        check_click(button, clicks)
        match = await self.wait_for_text(
            pattern, timeout, region, index=index, near=near, ignore_case=ignore_case,
            max_distance=max_distance,
        )  # fmt: skip
        await self.on_home_loop(self.screen.click(*match.center, button, clicks))
        return match

    async def wait_for_window(
        self, title: str | re.Pattern[str], timeout: float = DEFAULT_WAIT
    ) -> Window:
        """Wait until a visible window's title matches ``title`` (a regex, ``search``
        semantics; a ``str`` is compiled as one); the first such window, with its title
        and geometry. Needs the agent's desktop tools (python-xlib or xdotool in the guest).

        :raise GuestWaitTimeout: after ``timeout`` s, listing the titles last seen.
        :raise ToolError: the guest has no desktop the agent can reach.
        """
        regex = re.compile(title) if isinstance(title, str) else title

        async def listed(budget: float) -> list[Window]:
            return windows_from_result(await self._checked(LIST_WINDOWS))

        windows = await poll_until(
            listed, lambda found: any(regex.search(w.title) for w in found), timeout,
            f"a window titled {regex.pattern!r}",
            lambda found: "titles " + (", ".join(repr(w.title) for w in found[:20]) or "none"),
        )  # fmt: skip
        return next(w for w in windows if regex.search(w.title))

    # -- forensics --------------------------------------------------------------------

    async def fs_snapshot(
        self,
        root: str = "/",
        *,
        exclude: Sequence[str] | None = None,
        hash: bool = False,
        one_filesystem: bool = True,
        timeout: float | None = None,
        include_agent: bool = False,
        include_shares: bool = False,
    ) -> FsSnapshot:
        """Snapshot the guest tree under ``root``; ``after.diff(before)`` gives an FsDiff.

        The agent's own files (:attr:`agent_root`, its run dir) are left out unless
        ``include_agent=True``: what the test harness writes is not the scenario's; so
        are shared host folders (:attr:`shared_paths`) unless ``include_shares=True``.
        """
        params: dict[str, Any] = {"root_path": root, "hash": hash, "one_filesystem": one_filesystem}
        excluded = list(exclude or [])
        if not include_agent and self.agent_root:
            excluded.append(self.agent_root)
        if not include_shares:
            excluded += self.shared_paths
        if excluded:
            params["exclude"] = excluded
        if timeout is not None:
            params["timeout"] = timeout
        # Pages of NUL-terminated records (docs/agent.md): no giant JSON document.
        # The connection's call, not _checked: ``timeout`` is a param of the tool here.
        pages = SnapshotPages(root, like=self._last_snapshots.get(root))
        tool = GET_FILESYSTEM_SNAPSHOT
        # The guest's clock as the listing starts (taken_at_guest), asked beside the
        # first page: the listing does not wait for it.
        clock = asyncio.ensure_future(self.on_home_loop(self._connection.call(GET_TIMESTAMP, {})))
        ask = {**params, "format": "lines"}
        page = asyncio.ensure_future(self.on_home_loop(self._connection.call(tool, ask)))
        try:
            while True:
                result = tool_result(tool, await page)
                # Ask for the next page before reading this one: the agent lists it
                # while the host parses (one page ahead, never more).
                cursor = result.get("cursor")
                if isinstance(cursor, str):
                    ask = {"format": "lines", "cursor": cursor}
                    if timeout is not None:
                        ask["timeout"] = timeout
                    page = asyncio.ensure_future(
                        self.on_home_loop(self._connection.call(tool, ask))
                    )
                if pages.add(result) is None:
                    taken = await _guest_clock(clock)
                    made = pages.snapshot(os=self.server_info.get("platform"), taken_at_guest=taken)
                    self._last_snapshots[root] = made
                    return made
        finally:
            for pending in (page, clock):
                if not pending.done():
                    pending.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await pending

    @contextlib.asynccontextmanager
    async def watch_fs(
        self,
        root: str = "/",
        *,
        exclude: Sequence[str] | None = None,
        hash: bool = False,
        one_filesystem: bool = True,
        timeout: float | None = None,
        include_agent: bool = False,
        include_shares: bool = False,
    ) -> AsyncIterator[FsWatch]:
        """Snapshot ``root`` before and after the block; ``watch.diff`` holds the changes.

        Takes the same options as :meth:`fs_snapshot`, used for both snapshots.
        """

        async def snapshot() -> FsSnapshot:
            return await self.fs_snapshot(
                root,
                exclude=exclude,
                hash=hash,
                one_filesystem=one_filesystem,
                timeout=timeout,
                include_agent=include_agent,
                include_shares=include_shares,
            )

        watch = FsWatch(root, await snapshot())
        yield watch
        watch.after = await snapshot()
        watch.diff = watch.after.diff(watch.before)

    async def pull_changed(
        self,
        diff: FsDiff,
        dest: str | os.PathLike[str],
        *,
        include_timestamps_only: bool = True,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> list[Path]:
        """Copy created and modified files to ``dest/<guest path>`` (contained under dest).

        See :func:`pytest_adare.forensics.evidence.pull_changed` for the manifest and the limits.
        """
        return await pull_changed(
            self,
            diff,
            Path(dest),
            include_timestamps_only=include_timestamps_only,
            max_bytes=max_bytes,
        )

    # -- commands that must succeed, and waits ------------------------------------------

    async def succeed(self, command: str, /, **shell_options: Any) -> str:
        """Run ``command`` (with :meth:`shell`'s options); its stdout when it exits 0.

        :raise CommandFailed: it exited non-zero (command, exit code, stdout, stderr).
        """
        return (await self.shell(command, **shell_options)).check().stdout

    async def fail(self, command: str, /, **shell_options: Any) -> ShellResult:
        """Run ``command``; its result when it exits non-zero (stderr usually says why).

        :raise CommandSucceeded: it exited 0.
        """
        result = await self.shell(command, **shell_options)
        if result.ok:
            raise CommandSucceeded(result)
        return result

    async def wait_until_succeeds(
        self, command: str, /, timeout: float = DEFAULT_WAIT, **shell_options: Any
    ) -> ShellResult:
        """Run ``command`` every 100 ms until it exits 0; that run's result.

        :raise GuestWaitTimeout: after ``timeout`` s, with the last exit code and output.
        """
        return await self._wait_for_exit(command, True, timeout, shell_options)

    async def wait_until_fails(
        self, command: str, /, timeout: float = DEFAULT_WAIT, **shell_options: Any
    ) -> ShellResult:
        """Run ``command`` every 100 ms until it exits non-zero; that run's result.

        :raise GuestWaitTimeout: after ``timeout`` s, with the last output.
        """
        return await self._wait_for_exit(command, False, timeout, shell_options)

    async def _wait_for_exit(
        self, command: str, ok: bool, timeout: float, options: dict[str, Any]
    ) -> ShellResult:
        what = f"{command!r} to {'succeed' if ok else 'fail'}"

        async def run(budget: float) -> ShellResult:
            return await self.shell(command, **{"timeout": budget, **options})

        return await poll_until(
            run, lambda r: r.ok == ok, timeout, what, describe_run
        )  # fmt: skip

    async def wait_for_file(self, path: str, timeout: float = DEFAULT_WAIT) -> str:
        """Wait until ``path`` exists in the guest (any kind of file); returns it.

        :raise GuestWaitTimeout: after ``timeout`` s.
        """
        await poll_until(
            lambda budget: self.shell(f"test -e {shlex.quote(path)}", timeout=budget),
            lambda r: r.ok, timeout, f"the file {path}", lambda r: "it does not exist",
        )  # fmt: skip
        return path

    async def wait_for_port(
        self, port: int, timeout: float = DEFAULT_WAIT, *, closed: bool = False,
        from_host: bool = False,
    ) -> None:  # fmt: skip
        """Wait until a TCP socket in the guest listens on ``port`` (on any address), or
        with ``closed=True`` until none does. Reads the kernel's socket table
        (``/proc/net/tcp``), so the guest needs no ``ss`` or ``nc``. ``from_host=True``:
        then also until the port's forward (:meth:`port`) answers on this host.

        :raise GuestWaitTimeout: after ``timeout`` s, listing the ports that listened.
        :raise PortForwardError: ``from_host`` for a port that is not forwarded.
        """
        check_port(port)
        if from_host:
            address = self.port(port)
            if closed:
                raise ValueError("wait_for_port: from_host waits for an answer, not closed=True")

        async def listening(budget: float) -> set[int]:
            result = await self.shell(LISTENING_TCP_COMMAND, timeout=budget)
            return listening_tcp_ports(result.stdout)

        deadline = time.monotonic() + timeout
        await poll_until(
            listening, lambda ports: (port in ports) != closed, timeout,
            f"TCP port {port} to {'close' if closed else 'listen'}",
            lambda ports: "listening TCP ports " + (", ".join(map(str, sorted(ports))) or "none"),
        )  # fmt: skip
        if from_host:
            await poll_until(
                lambda budget: host_tcp_answer(address, budget), lambda why: not why,
                max(deadline - time.monotonic(), MIN_CHECK_BUDGET),
                f"guest TCP port {port} to answer on {address[0]}:{address[1]}", str,
            )  # fmt: skip

    async def wait_for_unit(self, unit: str, timeout: float = DEFAULT_WAIT) -> None:
        """Wait until the systemd unit ``unit`` is active.

        :raise AdareError: the guest does not run systemd, or the unit failed (with
            ``systemctl status``).
        :raise GuestWaitTimeout: after ``timeout`` s, with the unit's last state.
        """
        command = (
            f"[ -d /run/systemd/system ] || exit {NO_SYSTEMD}; "
            f"systemctl is-active -- {shlex.quote(unit)}"
        )

        def settled(result: ShellResult) -> bool:
            # Active, or a state no wait will change: no systemd, or the unit failed.
            return result.ok or result.returncode == NO_SYSTEMD or result.stdout.strip() == "failed"

        last = await poll_until(
            lambda budget: self.shell(command, timeout=budget), settled, timeout,
            f"the unit {unit} to be active",
            lambda r: f"state {r.stdout.strip() or 'unknown'!r} (exit code {r.returncode})",
        )  # fmt: skip
        if last.returncode == NO_SYSTEMD:
            raise AdareError(
                f"wait_for_unit({unit!r}): the guest does not run systemd "
                "(/run/systemd/system is missing); wait for the service another way, "
                "e.g. wait_for_port() or wait_until_succeeds()"
            )
        if not last.ok:
            status = await self.shell(f"systemctl status --no-pager -- {shlex.quote(unit)}")
            raise AdareError(f"the unit {unit} failed:\n{status.stdout[-3000:]}")

    async def journal(
        self,
        unit: str | None = None,
        since: datetime | str | None = None,
        *,
        identifier: str | None = None,
        limit: int = JOURNAL_LIMIT,
    ) -> list[JournalEntry]:
        """The systemd journal's newest ``limit`` entries (oldest first), parsed from
        ``journalctl -o json``: of one ``unit``, one syslog ``identifier``, since a time
        (a ``datetime``, naive is UTC, or journalctl's ``"-5min"``, ``"today"``).

        :raise AdareError: the guest does not run systemd, journalctl failed, or its
            output is not a journal's (or above the bound for ``limit`` entries).
        """
        command = journal_command(unit, since, identifier, limit)
        budget = output_budget(limit)
        result = await self.shell(command, timeout=120, max_output_bytes=budget)
        if result.returncode == NO_SYSTEMD:
            raise AdareError(
                "journal(): the guest does not run systemd (/run/systemd/system is "
                "missing); its logs are files (/var/log, the agent's run dir)"
            )
        if not result.ok:
            raise AdareError(
                f"journalctl failed with exit code {result.returncode}: {result.stderr[-500:]}"
            )
        if result.truncated:
            raise AdareError(
                f"the journal's output is above {budget} bytes for {limit} entries: "
                "ask for fewer (unit=, since=, identifier=, limit=)"
            )
        return parse_journal(result.stdout, limit)

    async def now(self) -> datetime:
        """The guest's clock now, as an aware ``datetime`` in the guest's own time zone
        (adare's ``save_timestamp``).

        :raise ToolError: the agent's answer is not a time.
        """
        result = await self._checked(GET_TIMESTAMP, use_local=True)
        return guest_time(result)

    async def idle(self, seconds: float) -> None:
        """Let ``seconds`` (0..3600) pass in the guest, by its clock (adare's ``idle``)."""
        if not 0 <= seconds <= MAX_IDLE:
            raise ValueError(f"idle() takes 0..{MAX_IDLE:g} seconds, got {seconds!r}")
        await self._checked(IDLE, duration=float(seconds), timeout=seconds + 30)

    # -- clock ------------------------------------------------------------------------

    async def set_time(self, moment: datetime) -> None:
        """Set the guest's system clock (and its RTC where ``hwclock`` exists) to ``moment``.

        A naive ``moment`` is taken as UTC. Linux guests: ``date -u -s @EPOCH``;
        Windows guests: PowerShell ``Set-Date``.

        :raise GuestCommandFailed: the guest refused (e.g. not allowed to set the time).
        """
        aware = moment if moment.tzinfo is not None else moment.replace(tzinfo=timezone.utc)
        epoch = aware.timestamp()
        if str(self.server_info.get("platform", "")).startswith("win"):
            utc = aware.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
            command = f"powershell -NoProfile -Command \"Set-Date -Date '{utc}'\""
        else:
            command = (
                f"date -u -s @{epoch:.6f} >/dev/null && "
                "{ ! command -v hwclock >/dev/null || hwclock -w -u 2>/dev/null || true; }"
            )
        (await self.shell(command, timeout=30)).check()

    # -- guest test functions ---------------------------------------------------------

    async def upload_testfunctions(self, directory: str | os.PathLike[str]) -> dict[str, Any]:
        """Zip the collection ``directory`` (``D/D.py``) and upload it to the agent."""
        data = base64.b64encode(zip_collection(Path(directory))).decode("ascii")
        return await self._checked(UPLOAD_TESTFUNCTIONS, testfunctions_data=data)

    async def install_dependencies(
        self, dependencies: Sequence[str], *, prefer_binary: bool = False
    ) -> dict[str, Any]:
        """pip-install ``dependencies`` for the guest test functions."""
        return await self._checked(
            INSTALL_DEPENDENCIES, dependencies=list(dependencies), prefer_binary=prefer_binary
        )

    async def set_variables(self, variables: Mapping[str, Any]) -> dict[str, Any]:
        """Set the variables guest test functions can read."""
        return await self._checked(SET_VARIABLES, variables=json.dumps(dict(variables)))

    async def run_test(self, name: str, /, **params: Any) -> TestOutcome:
        """Run the guest test function ``collection.name`` with ``params``."""
        result = await self._checked(RUN_TEST, test_name=name, resolved_test_data=params)
        verdict = result.get("result") or {}
        return TestOutcome(
            str(verdict.get("status", "UNKNOWN")), [str(d) for d in verdict.get("details", [])]
        )


MouseButton = Literal["left", "right", "middle"]
MAX_IDLE = 3600.0


def check_click(button: str, clicks: int) -> None:
    """:raise ValueError: not a mouse button, or not 1..3 clicks."""
    if button not in ("left", "right", "middle"):
        raise ValueError(f"button must be 'left', 'right' or 'middle', got {button!r}")
    if type(clicks) is not int or not 1 <= clicks <= 3:
        raise ValueError(f"clicks must be 1, 2 or 3, got {clicks!r}")


def describe_run(result: ShellResult) -> str:
    """A shell run for a timeout's message: exit code and the end of its output."""
    return (
        f"exit code {result.returncode}, stdout {output_tail(result.stdout)}, "
        f"stderr {output_tail(result.stderr)}"
    )


async def _guest_clock(asked: asyncio.Future[dict[str, Any]]) -> float | None:
    """The epoch seconds of a ``get_timestamp`` call; None when the agent has no such
    tool (the time is unknown, the snapshot stands).

    :raise SnapshotFormatError: the answer holds no finite time.
    """
    try:
        result = await asked
    except ToolError:
        return None
    return number_or_none(result.get("timestamp"), "the guest clock (get_timestamp)")


def guest_time(result: Mapping[str, Any]) -> datetime:
    """The aware time in a ``get_timestamp(use_local=True)`` result (not trusted: checked).

    :raise ToolError: neither a parseable ``local_time`` nor a numeric ``timestamp``.
    """
    local = result.get("local_time")
    if isinstance(local, str) and len(local) <= 64:
        try:
            moment = datetime.fromisoformat(local)
        except ValueError:
            moment = None
        if moment is not None and moment.tzinfo is not None:
            return moment
    stamp, offset = result.get("timestamp"), result.get("utc_offset_seconds", 0)
    if isinstance(stamp, (int, float)) and type(offset) is int and abs(offset) < 86400:
        try:
            zone = timezone(timedelta(seconds=offset))
            return datetime.fromtimestamp(stamp, zone)
        except (OverflowError, OSError, ValueError):
            pass
    raise ToolError(GET_TIMESTAMP, "the agent's answer holds no valid time", dict(result))


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


__all__ = [
    "AsyncGuest",
    "AsyncKeyboard",
    "EventHub",
    "FsWatch",
    "Guest",
    "Keyboard",
    "Screen",
    "ShellResult",
    "TestOutcome",
    "Window",
    "tool_result",
]
