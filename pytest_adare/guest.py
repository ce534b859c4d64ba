"""The Guest facade (DESIGN §5): the test's vocabulary over one ``call()`` primitive.

:class:`AsyncGuest` is the core; :class:`Guest` runs each of its coroutines on the
process-wide loop thread (:func:`pytest_adare.loop_thread.shared_loop`), so the two
can never disagree::

    r = guest.shell("echo hi; exit 3")          # sync, any thread
    r = await guest.aio.shell("echo hi; exit 3")  # async twin, on the shared loop

Transports only implement :class:`pytest_adare.agent.connection.AgentConnection`. With
``host_gui`` set (``gui="host"``), screenshots, pointer and keyboard go to the
Machine's QMP ``screendump``/``input-send-event`` instead of the in-guest agent.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import hashlib
import io
import json
import os
import secrets
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

from PIL import Image

from pytest_adare.agent.connection import AgentConnection, EventCallback
from pytest_adare.agent.testfunction_upload import zip_collection
from pytest_adare.errors import GuestCommandFailed, ToolError
from pytest_adare.forensics.diff import FsDiff
from pytest_adare.forensics.evidence import DEFAULT_MAX_BYTES, pull_changed
from pytest_adare.forensics.snapshot import FsSnapshot
from pytest_adare.loop_thread import shared_loop
from pytest_adare.screen_match import Box, ImageLike, Region, wait_for_image

T = TypeVar("T")
ProgressCallback = Callable[[int, int], None]
"""Called as ``progress(bytes_done, bytes_total)`` during a file transfer."""

PULL_CHUNK = 2 * 1024 * 1024
PUSH_CHUNK = 4 * 1024 * 1024  # 5.4 MiB as base64: well under the 16 MiB message limit
PULL_WINDOW = 3  # chunk requests in flight at once (guest memory: several chunk sizes each)
# 2 MiB x 3 measured as fast as 4 MiB x 2 under TCG with half the guest memory; an
# 8 MiB chunk x 2 got the agent killed in a 256 MiB guest.


@dataclass(frozen=True)
class ShellResult:
    """What ``guest.shell()`` returns; ``.check()`` raises when ``returncode != 0``."""

    returncode: int
    stdout: str
    stderr: str
    command: str

    def check(self) -> ShellResult:
        """Return self when the command succeeded, else raise :class:`GuestCommandFailed`."""
        if self.returncode != 0:
            raise GuestCommandFailed(self)
        return self

    @property
    def ok(self) -> bool:
        """True when the command exited 0."""
        return self.returncode == 0


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


class HostGui(Protocol):
    """The Machine's host-side screen and input (QMP), used when ``gui="host"``."""

    async def ascreendump(self) -> Image.Image: ...
    async def amouse_move(self, x: int, y: int) -> None: ...
    async def amouse_click(self, x: int, y: int, button: str = "left", count: int = 1) -> None: ...
    async def amouse_drag(self, x1: int, y1: int, x2: int, y2: int) -> None: ...
    async def ascroll(self, direction: str, amount: int) -> None: ...
    async def atype_text(self, text: str) -> None: ...
    async def asend_keys(self, keys: Sequence[str]) -> None: ...


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
        if self._guest.host_gui is not None:
            await self._guest.on_home_loop(self._guest.host_gui.atype_text(text))
        else:
            await self._guest.call("keyboard", type="type", key=text)

    async def press(self, key: str) -> None:
        """Press and release one key, e.g. ``"enter"``."""
        if self._guest.host_gui is not None:
            await self._guest.on_home_loop(self._guest.host_gui.asend_keys([key]))
        else:
            await self._guest.call("keyboard", type="press", key=key)

    async def hotkey(self, *keys: str) -> None:
        """Press ``keys`` together, e.g. ``hotkey("ctrl", "c")``."""
        if not keys:
            raise ValueError("hotkey() needs at least one key")
        if self._guest.host_gui is not None:
            await self._guest.on_home_loop(self._guest.host_gui.asend_keys(list(keys)))
        else:
            await self._guest.call("keyboard", type="hotkey", key="+".join(keys))


class AsyncGuest:
    """The async core of the facade.

    The connection lives on the loop it was made on (the shared loop thread for VMs);
    awaiting these methods from another loop (e.g. a pytest-asyncio test) is fine:
    the work is handed to the connection's loop and awaited from yours.
    """

    def __init__(self, connection: AgentConnection, *, host_gui: HostGui | None = None) -> None:
        self.events = EventHub()
        self.host_gui = host_gui
        self.keyboard = AsyncKeyboard(self)
        self._connection = connection
        self._unsubscribe = connection.subscribe(self.events.dispatch)
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
    def server_info(self) -> dict[str, Any]:
        """The agent's identity: version, bundle_hash, platform, tools."""
        return self._connection.server_info

    async def call(
        self, tool: str, *, timeout: float | None = None, **params: Any
    ) -> dict[str, Any]:
        """Call any agent tool; returns its raw ``result`` dict (``success=false`` raises)."""
        return await self.on_home_loop(self._connection.call(tool, params, timeout))

    async def _checked(self, tool: str, **params: Any) -> dict[str, Any]:
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
    ) -> ShellResult:
        """Run ``command`` in the guest's shell and return rc, stdout and stderr.

        A non-zero exit is not an error here: call ``.check()`` for that.

        :raise ToolError: the command could not run at all (or timed out without a code).
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
        result = await self.call("execute_shell", **params)
        returncode = result.get("returncode")
        if not isinstance(returncode, int):
            message = result.get("message", "no return code")
            raise ToolError("execute_shell", f"{command!r}: {message}", result)
        return ShellResult(
            returncode, str(result.get("stdout", "")), str(result.get("stderr", "")), command
        )

    # -- files ------------------------------------------------------------------------

    async def pull(
        self,
        guest_path: str,
        host_path: str | os.PathLike[str],
        *,
        progress: ProgressCallback | None = None,
        chunk_size: int = PULL_CHUNK,
    ) -> Path:
        """Copy a guest file to ``host_path``: chunked, sha256-verified, atomic on the host.

        :raise ToolError: the guest file cannot be read, is a directory, or the hash differs.
        """
        target = Path(host_path)
        first = await self._pull_chunk(guest_path, 0, chunk_size)
        if first.get("is_directory"):
            raise ToolError("pull_file_chunk", f"{guest_path!r} is a directory in the guest", first)
        total_chunks, file_size = _chunk_layout(guest_path, first, chunk_size)
        part = target.with_name(f".{target.name}.{secrets.token_hex(4)}.part")
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            sha256 = await self._pull_into(
                part, guest_path, first, total_chunks, file_size, chunk_size, progress
            )
            actual = await asyncio.to_thread(_file_sha256, part)
            if sha256 is not None and actual != sha256:
                raise ToolError(
                    "pull_file_chunk",
                    f"{guest_path!r}: sha256 mismatch (guest {sha256}, host {actual})",
                    None,
                )
            os.replace(part, target)
        finally:
            part.unlink(missing_ok=True)
        return target

    async def _pull_chunk(self, guest_path: str, index: int, chunk_size: int) -> dict[str, Any]:
        return await self._checked(
            "pull_file_chunk", guest_path=guest_path, chunk_index=index, chunk_size=chunk_size
        )

    async def _pull_into(
        self,
        part: Path,
        guest_path: str,
        first: dict[str, Any],
        total_chunks: int,
        file_size: int,
        chunk_size: int,
        progress: ProgressCallback | None,
    ) -> str | None:
        """Write every chunk at its offset, keeping a few requests in flight."""
        done = 0
        last: dict[str, Any] = first
        with part.open("wb") as out:

            def write(chunk: dict[str, Any], index: int) -> None:
                nonlocal done
                data = _chunk_data(guest_path, chunk, index, chunk_size, file_size)
                out.seek(index * chunk_size)
                out.write(data)
                done += len(data)
                if progress is not None:
                    progress(done, file_size)

            write(first, 0)
            indexes = iter(range(1, total_chunks))
            in_flight: dict[asyncio.Task[dict[str, Any]], int] = {}
            try:
                while True:
                    while len(in_flight) < PULL_WINDOW and (i := next(indexes, None)) is not None:
                        task = asyncio.ensure_future(self._pull_chunk(guest_path, i, chunk_size))
                        in_flight[task] = i
                    if not in_flight:
                        break
                    finished, _ = await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
                    for task in finished:
                        index = in_flight.pop(task)
                        chunk = task.result()
                        write(chunk, index)
                        if index == total_chunks - 1:
                            last = chunk
            finally:
                for task in in_flight:
                    task.cancel()
        sha256 = last.get("sha256")
        if not isinstance(sha256, str) or not sha256:
            raise ToolError("pull_file_chunk", f"{guest_path!r}: last chunk has no sha256", None)
        return sha256

    async def push(
        self,
        host_path: str | os.PathLike[str],
        guest_path: str,
        *,
        mode: int | None = None,
        progress: ProgressCallback | None = None,
        chunk_size: int = PUSH_CHUNK,
    ) -> None:
        """Copy a host file to ``guest_path`` (chunked; the agent verifies sha256, renames).

        :raise FileNotFoundError: ``host_path`` does not exist.
        :raise ToolError: the agent refused a chunk or the hash differed.
        """
        source = Path(host_path)
        size, sha256 = await asyncio.to_thread(_size_and_sha256, source)
        total_chunks = max(1, -(-size // chunk_size))
        done = 0
        src = await asyncio.to_thread(source.open, "rb")
        try:
            for index in range(total_chunks):
                data = await asyncio.to_thread(src.read, chunk_size)
                params: dict[str, Any] = {
                    "guest_path": guest_path,
                    "chunk_index": index,
                    "chunk_data": base64.b64encode(data).decode("ascii"),
                    "total_chunks": total_chunks,
                }
                if index == total_chunks - 1:
                    params["sha256"] = sha256
                    if mode is not None:
                        params["mode"] = mode
                await self._checked("push_file_chunk", **params)
                done += len(data)
                if progress is not None:
                    progress(done, size)
        finally:
            src.close()

    # -- GUI --------------------------------------------------------------------------

    async def screenshot(self) -> Image.Image:
        """The guest's screen as a PIL image (agent, or QMP screendump with ``gui="host"``)."""
        if self.host_gui is not None:
            return await self.on_home_loop(self.host_gui.ascreendump())
        result = await self._checked("screenshot")
        png = base64.b64decode(result["image"]["data"])
        image = Image.open(io.BytesIO(png))
        image.load()
        return image

    async def click(self, x: int, y: int) -> None:
        """Left click at screen pixel (x, y)."""
        await self._pointer("click", x, y, "left", 1)

    async def double_click(self, x: int, y: int) -> None:
        """Double click at (x, y)."""
        await self._pointer("double_click", x, y, "left", 2)

    async def right_click(self, x: int, y: int) -> None:
        """Right click at (x, y)."""
        await self._pointer("right_click", x, y, "right", 1)

    async def _pointer(self, tool: str, x: int, y: int, button: str, count: int) -> None:
        if self.host_gui is not None:
            await self.on_home_loop(self.host_gui.amouse_click(x, y, button, count))
        else:
            await self._checked(tool, x=x, y=y)

    async def goto(self, x: int, y: int) -> None:
        """Move the pointer to (x, y)."""
        if self.host_gui is not None:
            await self.on_home_loop(self.host_gui.amouse_move(x, y))
        else:
            await self._checked("goto", x=x, y=y)

    async def drag(self, x1: int, y1: int, x2: int, y2: int) -> None:
        """Press at (x1, y1), move to (x2, y2), release."""
        if self.host_gui is not None:
            await self.on_home_loop(self.host_gui.amouse_drag(x1, y1, x2, y2))
        else:
            await self._checked("drag", x1=x1, y1=y1, x2=x2, y2=y2)

    async def scroll(self, direction: str = "down", amount: int = 3) -> None:
        """Scroll ``amount`` steps ``up``, ``down``, ``left`` or ``right``."""
        if direction not in ("up", "down", "left", "right"):
            raise ValueError(f"scroll direction must be up/down/left/right, got {direction!r}")
        if self.host_gui is not None:
            await self.on_home_loop(self.host_gui.ascroll(direction, amount))
        else:
            await self._checked("scroll", direction=direction, amount=amount)

    async def wait_for_image(
        self,
        template: ImageLike,
        timeout: float = 10.0,
        region: Region | None = None,
        threshold: float = 0.9,
    ) -> Box:
        """Take screenshots until ``template`` shows; its :class:`Box` on the screen.

        GUI events of the agent wake the matcher early (see :mod:`pytest_adare.screen_match`).

        :raise ImageNotFound: after ``timeout`` s, naming the best score and a saved screenshot.
        """
        return await wait_for_image(
            self.screenshot, template, timeout, region, threshold, events=self.events
        )

    # -- forensics --------------------------------------------------------------------

    async def fs_snapshot(
        self,
        root: str = "/",
        *,
        exclude: Sequence[str] | None = None,
        hash: bool = False,
        one_filesystem: bool = True,
        timeout: float | None = None,
    ) -> FsSnapshot:
        """Snapshot the guest tree under ``root``; ``after.diff(before)`` gives an FsDiff."""
        params: dict[str, Any] = {"root_path": root, "hash": hash, "one_filesystem": one_filesystem}
        if exclude is not None:
            params["exclude"] = list(exclude)
        if timeout is not None:
            params["timeout"] = timeout
        result = await self._checked("get_filesystem_snapshot", **params)
        return FsSnapshot.from_result(
            result, root=root, os=self.server_info.get("platform"), consume=True
        )

    @contextlib.asynccontextmanager
    async def watch_fs(self, root: str = "/", **options: Any) -> AsyncIterator[FsWatch]:
        """Snapshot ``root`` before and after the block; ``watch.diff`` holds the changes."""
        watch = FsWatch(root, await self.fs_snapshot(root, **options))
        yield watch
        watch.after = await self.fs_snapshot(root, **options)
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

    # -- guest test functions ---------------------------------------------------------

    async def upload_testfunctions(self, directory: str | os.PathLike[str]) -> dict[str, Any]:
        """Zip the collection ``directory`` (``D/D.py``) and upload it to the agent."""
        data = base64.b64encode(zip_collection(Path(directory))).decode("ascii")
        return await self._checked("upload_testfunctions", testfunctions_data=data)

    async def install_dependencies(
        self, dependencies: Sequence[str], *, prefer_binary: bool = False
    ) -> dict[str, Any]:
        """pip-install ``dependencies`` for the guest test functions."""
        return await self._checked(
            "install_dependencies", dependencies=list(dependencies), prefer_binary=prefer_binary
        )

    async def set_variables(self, variables: Mapping[str, Any]) -> dict[str, Any]:
        """Set the variables guest test functions can read."""
        return await self._checked("set_variables", variables=json.dumps(dict(variables)))

    async def run_test(self, name: str, **params: Any) -> TestOutcome:
        """Run the guest test function ``collection.name`` with ``params``."""
        result = await self._checked("run_test", test_name=name, resolved_test_data=params)
        verdict = result.get("result") or {}
        return TestOutcome(
            str(verdict.get("status", "UNKNOWN")), [str(d) for d in verdict.get("details", [])]
        )


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1024 * 1024):
            digest.update(block)
    return digest.hexdigest()


def _size_and_sha256(path: Path) -> tuple[int, str]:
    return path.stat().st_size, _file_sha256(path)


def _run(coro: Coroutine[Any, Any, T]) -> T:
    return shared_loop().run(coro)


class Keyboard:
    """``guest.keyboard``: sync twin of :class:`AsyncKeyboard`."""

    def __init__(self, aio: AsyncKeyboard) -> None:
        self.aio = aio

    def type(self, text: str) -> None:
        """Type ``text`` as keystrokes."""
        _run(self.aio.type(text))

    def press(self, key: str) -> None:
        """Press and release one key."""
        _run(self.aio.press(key))

    def hotkey(self, *keys: str) -> None:
        """Press ``keys`` together."""
        _run(self.aio.hotkey(*keys))


class Guest:
    """The synchronous facade; ``guest.aio`` is the :class:`AsyncGuest` it drives.

    Construct it from an :class:`AsyncGuest` (the VM does this); every method runs
    the async twin on the shared loop thread. Event callbacks run on that thread.
    """

    def __init__(self, aio: AsyncGuest) -> None:
        self.aio = aio
        self.keyboard = Keyboard(aio.keyboard)

    @property
    def events(self) -> EventHub:
        """Subscribe to agent events: ``guest.events.subscribe(cb)`` / ``.record()``."""
        return self.aio.events

    @property
    def server_info(self) -> dict[str, Any]:
        """The agent's identity: version, bundle_hash, platform, tools."""
        return self.aio.server_info

    def call(self, tool: str, *, timeout: float | None = None, **params: Any) -> dict[str, Any]:
        """Call any agent tool and return its raw ``result`` dict."""
        return _run(self.aio.call(tool, timeout=timeout, **params))

    def shell(self, command: str, **options: Any) -> ShellResult:
        """Run ``command``; see :meth:`AsyncGuest.shell` for options."""
        return _run(self.aio.shell(command, **options))

    def pull(self, guest_path: str, host_path: str | os.PathLike[str], **options: Any) -> Path:
        """Copy a guest file to the host; see :meth:`AsyncGuest.pull`."""
        return _run(self.aio.pull(guest_path, host_path, **options))

    def push(self, host_path: str | os.PathLike[str], guest_path: str, **options: Any) -> None:
        """Copy a host file into the guest; see :meth:`AsyncGuest.push`."""
        _run(self.aio.push(host_path, guest_path, **options))

    def screenshot(self) -> Image.Image:
        """The guest's screen as a PIL image."""
        return _run(self.aio.screenshot())

    def click(self, x: int, y: int) -> None:
        """Left click at (x, y)."""
        _run(self.aio.click(x, y))

    def double_click(self, x: int, y: int) -> None:
        """Double click at (x, y)."""
        _run(self.aio.double_click(x, y))

    def right_click(self, x: int, y: int) -> None:
        """Right click at (x, y)."""
        _run(self.aio.right_click(x, y))

    def goto(self, x: int, y: int) -> None:
        """Move the pointer to (x, y)."""
        _run(self.aio.goto(x, y))

    def drag(self, x1: int, y1: int, x2: int, y2: int) -> None:
        """Drag from (x1, y1) to (x2, y2)."""
        _run(self.aio.drag(x1, y1, x2, y2))

    def scroll(self, direction: str = "down", amount: int = 3) -> None:
        """Scroll ``amount`` steps in ``direction``."""
        _run(self.aio.scroll(direction, amount))

    def wait_for_image(self, template: ImageLike, **options: Any) -> Box:
        """Wait until ``template`` shows on screen; see :meth:`AsyncGuest.wait_for_image`."""
        return _run(self.aio.wait_for_image(template, **options))

    def fs_snapshot(self, root: str = "/", **options: Any) -> FsSnapshot:
        """Snapshot the guest tree under ``root``."""
        return _run(self.aio.fs_snapshot(root, **options))

    @contextlib.contextmanager
    def watch_fs(self, root: str = "/", **options: Any) -> Iterator[FsWatch]:
        """Snapshot ``root`` before and after the block; ``watch.diff`` holds the changes."""
        watch = FsWatch(root, self.fs_snapshot(root, **options))
        yield watch
        watch.after = self.fs_snapshot(root, **options)
        watch.diff = watch.after.diff(watch.before)

    def pull_changed(
        self,
        diff: FsDiff,
        dest: str | os.PathLike[str],
        *,
        include_timestamps_only: bool = True,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> list[Path]:
        """Copy created and modified files to ``dest/<guest path>``."""
        return _run(
            self.aio.pull_changed(
                diff, dest, include_timestamps_only=include_timestamps_only, max_bytes=max_bytes
            )
        )

    def upload_testfunctions(self, directory: str | os.PathLike[str]) -> dict[str, Any]:
        """Upload a test-function collection directory."""
        return _run(self.aio.upload_testfunctions(directory))

    def install_dependencies(self, dependencies: Sequence[str], **options: Any) -> dict[str, Any]:
        """pip-install dependencies for guest test functions."""
        return _run(self.aio.install_dependencies(dependencies, **options))

    def set_variables(self, variables: Mapping[str, Any]) -> dict[str, Any]:
        """Set variables for guest test functions."""
        return _run(self.aio.set_variables(variables))

    def run_test(self, name: str, **params: Any) -> TestOutcome:
        """Run the guest test function ``collection.name``."""
        return _run(self.aio.run_test(name, **params))


__all__ = [
    "AsyncGuest",
    "AsyncKeyboard",
    "EventHub",
    "FsWatch",
    "Guest",
    "HostGui",
    "Keyboard",
    "ShellResult",
    "TestOutcome",
    "tool_result",
]


def _chunk_layout(guest_path: str, first: dict[str, Any], chunk_size: int) -> tuple[int, int]:
    """(total_chunks, file_size) from chunk 0, checked for consistency: guest data is
    untrusted, and a lying size must not make the host write or hash gigabytes."""
    try:
        total_chunks, file_size = int(first["total_chunks"]), int(first.get("file_size", 0))
    except (KeyError, TypeError, ValueError):
        raise ToolError(
            "pull_file_chunk", f"{guest_path!r}: chunk 0 has no valid size", None
        ) from None
    expected = max(1, -(-file_size // chunk_size)) if file_size >= 0 else -1
    if total_chunks != expected:
        raise ToolError(
            "pull_file_chunk",
            f"{guest_path!r}: guest reports {total_chunks} chunks for {file_size} bytes "
            f"(expected {expected} of {chunk_size} bytes)",
            None,
        )
    return total_chunks, file_size


def _chunk_data(
    guest_path: str, chunk: dict[str, Any], index: int, chunk_size: int, file_size: int
) -> bytes:
    """The bytes of chunk ``index``, refused unless it is the chunk asked for, with the
    length the announced file size implies (the file changed, or the guest lies)."""
    if chunk.get("chunk_index") != index:
        raise ToolError(
            "pull_file_chunk",
            f"{guest_path!r}: asked for chunk {index}, got {chunk.get('chunk_index')!r}",
            None,
        )
    try:
        data = base64.b64decode(chunk.get("chunk_data") or "", validate=True)
    except (binascii.Error, ValueError):
        raise ToolError(
            "pull_file_chunk", f"{guest_path!r}: chunk {index} is not base64", None
        ) from None
    expected = min(chunk_size, file_size - index * chunk_size)
    if len(data) != expected:
        raise ToolError(
            "pull_file_chunk",
            f"{guest_path!r}: chunk {index} has {len(data)} bytes, expected {expected} "
            "(the file changed during the pull?)",
            None,
        )
    return data
