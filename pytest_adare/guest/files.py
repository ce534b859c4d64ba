"""The facade's file transfer: ``pull`` a guest file to the host, ``push`` one to the
guest (the mechanism is :mod:`pytest_adare.agent.transfer`)."""

from __future__ import annotations

import os
from pathlib import Path

from pytest_adare.agent.transfer import (
    DEFAULT_PULL_MAX_BYTES,
    ProgressCallback,
    binary_transport,
    pull_file,
    push_file,
)
from pytest_adare.guest.core import GuestCore


class GuestFiles(GuestCore):
    """Files copied between the host and the guest: chunked, sha256-verified."""

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
