"""The facade's forensics: snapshots of the guest's file system (``fs_snapshot``,
``watch_fs`` and its :class:`FsWatch`) and the changed files pulled to the host."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from adare_guest.tool_names import GET_FILESYSTEM_SNAPSHOT, GET_TIMESTAMP
from pytest_adare.errors import ToolError
from pytest_adare.forensics.diff import FsDiff
from pytest_adare.forensics.entry import number_or_none
from pytest_adare.forensics.evidence import DEFAULT_MAX_BYTES, pull_changed
from pytest_adare.forensics.snapshot import FsSnapshot, SnapshotPages
from pytest_adare.guest.core import tool_result
from pytest_adare.guest.files import GuestFiles


@dataclass
class FsWatch:
    """Filled by :meth:`AsyncGuest.watch_fs`: ``before``, then ``after`` and ``diff`` on exit."""

    root: str
    before: FsSnapshot
    after: FsSnapshot | None = None
    diff: FsDiff | None = None


class GuestForensics(GuestFiles):
    """The guest's file system as host data: snapshots, their diff, the changed files."""

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
