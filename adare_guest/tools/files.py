"""File tools: chunked and binary pull and push, filesystem snapshots.

Paths in results are ``str``; names that are not valid UTF-8 are kept with
``surrogateescape`` (each undecodable byte ``0xXY`` becomes the lone surrogate
``U+DCXY``). The JSON encoder writes those as ``\\udcXY`` escapes, and the host
gets the exact original bytes back with ``os.fsencode(path)``.

The mechanism lives in :mod:`adare_guest.file_transfer` (moving files),
:mod:`adare_guest.fs_walk` and :mod:`adare_guest.fs_listing` (snapshots) and
:mod:`adare_guest.regular_files` (opening guest files safely).
"""

from __future__ import annotations

import base64
import binascii
import os
import stat
import threading
import time
from typing import Any, Literal

from adare_guest import fs_listing
from adare_guest.binary_transfer import (
    DEFAULT_CHUNK,
    DEFAULT_WINDOW,
    TransferRefused,
    check_transfer_params,
)
from adare_guest.config import AgentConfig
from adare_guest.file_transfer import (
    DEFAULT_CHUNK_SIZE,
    MAX_CHUNK_SIZE,
    FileToolError,
    PullHashes,
    PushTarget,
    Uploads,
    error_result,
    pull_chunk,
    read_exactly,
    validate_guest_path,
)
from adare_guest.fs_walk import Walk, skipped_roots, snapshot_root, walk_records, walk_tree
from adare_guest.regular_files import NotRegularFile, kind_name, open_regular, stat_metadata
from adare_guest.tools.base import AgentState, CallContext, ToolGroup, tool


class FileTools(ToolGroup):
    """Chunked and binary file transfer, filesystem snapshots."""

    def __init__(self, config: AgentConfig, state: AgentState) -> None:
        super().__init__(config, state)
        self._listings = fs_listing.Listings()
        self._pull_hashes = PullHashes()
        self._uploads = Uploads()

    @tool(timeout=120)
    async def pull_file_chunk(
        self,
        ctx: CallContext,
        *,
        guest_path: str,
        chunk_index: int = 0,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
    ) -> dict[str, Any]:
        """Chunk ``chunk_index`` of ``guest_path`` as base64 (see DESIGN §3 for the keys)."""
        if 1 <= chunk_size <= MAX_CHUNK_SIZE:
            try:
                # The chunk's bytes and their base64 text stay in memory until sent.
                await ctx.reserve_output(2 * chunk_size)
            except TimeoutError as exc:
                return error_result(
                    f"cannot read {guest_path}: {exc}", chunk_index=chunk_index, is_directory=False
                )
        self._pull_hashes.begin(guest_path)
        try:
            return await ctx.run_in_thread(
                pull_chunk, guest_path, chunk_index, chunk_size, self._pull_hashes
            )
        except (OSError, FileToolError) as exc:
            return error_result(
                f"cannot read {guest_path}: {_reason(exc)}",
                chunk_index=chunk_index,
                is_directory=False,
            )
        finally:
            self._pull_hashes.end(guest_path)

    @tool(timeout=120)
    async def push_file_chunk(
        self,
        ctx: CallContext,
        *,
        guest_path: str,
        chunk_index: int,
        chunk_data: str,
        total_chunks: int,
        sha256: str | None = None,
        mode: int | None = None,
    ) -> dict[str, Any]:
        """Store chunk ``chunk_index`` of ``total_chunks``; the last one verifies ``sha256``
        and atomically renames the temporary file onto ``guest_path`` with ``mode``."""
        try:
            path = validate_guest_path(guest_path)
            if total_chunks < 1 or not 0 <= chunk_index < total_chunks:
                raise FileToolError(
                    f"need 0 <= chunk_index < total_chunks, got {chunk_index}/{total_chunks}"
                )
            if mode is not None and not 0 <= mode <= 0o7777:
                raise FileToolError(f"mode must be 0..0o7777, got {mode}")
            try:
                data = base64.b64decode(chunk_data, validate=True)
            except binascii.Error as exc:
                raise FileToolError(f"chunk_data is not valid base64: {exc}") from None
            return await ctx.run_in_thread(
                self._uploads.push, path, chunk_index, data, total_chunks, sha256, mode
            )
        except (OSError, FileToolError) as exc:
            return error_result(
                f"cannot write {guest_path}: {_reason(exc)}", chunk_index=chunk_index
            )

    @tool(timeout=60)
    async def pull_file(
        self,
        ctx: CallContext,
        *,
        guest_path: str,
        transfer_id: int,
        chunk_size: int = DEFAULT_CHUNK,
        window: int = DEFAULT_WINDOW,
    ) -> dict[str, Any]:
        """Stream ``guest_path`` to the host in binary messages (docs/agent.md, "Binary
        transfer"); the result announces the size, the bytes follow (or precede) it."""
        if ctx.transfers is None:
            return error_result("this connection carries no binary messages; use pull_file_chunk")
        problem = check_transfer_params(transfer_id, chunk_size, window)
        if problem is not None:
            return error_result(problem, is_directory=False)
        try:
            # Symlinks are followed, as by pull_file_chunk; the descriptor must be a file.
            fd, fst = await ctx.run_in_thread(open_regular, guest_path)
        except NotRegularFile as exc:
            return error_result(
                f"{guest_path} is {kind_name(exc.mode)}, not a regular file",
                is_directory=stat.S_ISDIR(exc.mode),
            )
        except OSError as exc:
            return error_result(f"cannot read {guest_path}: {_reason(exc)}", is_directory=False)
        try:
            ctx.transfers.start_pull(
                transfer_id,
                fst.st_size,
                chunk=chunk_size,
                window=window,
                read=lambda n: read_exactly(fd, n),
                close=lambda: os.close(fd),
            )
        except TransferRefused as exc:
            os.close(fd)
            return error_result(f"cannot pull {guest_path}: {exc}", is_directory=False)
        return {
            "status": "success",
            "transfer_id": transfer_id,
            "file_size": fst.st_size,
            "chunk_size": chunk_size,
            "window": window,
            "is_directory": False,
            "file_metadata": {"path": guest_path, **stat_metadata(fst)},
        }

    @tool(timeout=60)
    async def push_file(
        self,
        ctx: CallContext,
        *,
        guest_path: str,
        transfer_id: int,
        file_size: int,
        mode: int | None = None,
        chunk_size: int = DEFAULT_CHUNK,
        window: int = DEFAULT_WINDOW,
    ) -> dict[str, Any]:
        """Accept ``file_size`` bytes for ``guest_path`` in binary messages; END (with the
        sha256) puts the file in place atomically with ``mode`` (docs/agent.md)."""
        if ctx.transfers is None:
            return error_result("this connection carries no binary messages; use push_file_chunk")
        try:
            path = validate_guest_path(guest_path)
            problem = check_transfer_params(transfer_id, chunk_size, window)
            if problem is not None:
                raise FileToolError(problem)
            if not 0 <= file_size < 2**63:
                raise FileToolError(f"file_size must be 0..2**63-1, got {file_size}")
            if mode is not None and not 0 <= mode <= 0o7777:
                raise FileToolError(f"mode must be 0..0o7777, got {mode}")
            target = await ctx.run_in_thread(PushTarget, path, mode)
        except (OSError, FileToolError) as exc:
            return error_result(f"cannot write {guest_path}: {_reason(exc)}")
        try:
            ctx.transfers.start_push(
                transfer_id,
                file_size,
                chunk=chunk_size,
                window=window,
                write=target.write,
                finish=target.finish,
                abandon=target.abandon,
            )
        except TransferRefused as exc:
            target.abandon()
            return error_result(f"cannot write {guest_path}: {exc}")
        return {
            "status": "success",
            "transfer_id": transfer_id,
            "file_size": file_size,
            "chunk_size": chunk_size,
            "window": window,
            "path": path,
        }

    @tool(timeout=300)
    async def get_filesystem_snapshot(
        self,
        ctx: CallContext,
        *,
        root_path: str | None = None,
        timeout: float | None = None,
        exclude: list[str] | str | None = None,
        hash: bool = False,
        one_filesystem: bool = True,
        format: Literal["json", "lines"] = "json",
        cursor: str | None = None,
        page_bytes: int = fs_listing.DEFAULT_PAGE_BYTES,
    ) -> dict[str, Any]:
        """Metadata of every entry under ``root_path`` (see the module docstring for names).

        ``format="lines"``: the entries come as records (:mod:`adare_guest.fs_listing`)
        in pages of about ``page_bytes``; a page's ``cursor`` (None on the last) asks
        for the next one, the other params then being those of the first call.
        """
        if format == "lines":
            return await self._snapshot_page(
                ctx, cursor, page_bytes, root_path, exclude, hash, one_filesystem
            )
        root = snapshot_root(root_path)
        patterns = [exclude] if isinstance(exclude, str) else list(exclude or [])
        walk = Walk(root, patterns, hash, one_filesystem, ctx.cancelled, ctx.deadline)
        started = time.monotonic()
        try:
            await ctx.run_in_thread(walk_tree, walk)
        except OSError as exc:
            return error_result(f"cannot snapshot {root}: {_reason(exc)}")
        elapsed = time.monotonic() - started
        counts: dict[str, int] = {"file": 0, "dir": 0, "symlink": 0, "other": 0}
        for meta in walk.snapshot.values():
            counts[meta["type"]] += 1
        result: dict[str, Any] = {
            "status": "error" if walk.timed_out else "success",
            "message": (
                f"timed out after {ctx.timeout:g} s; snapshot is partial"
                if walk.timed_out
                else f"{len(walk.snapshot)} entries under {root}"
            ),
            "root_path": root,
            "snapshot": walk.snapshot,
            "file_count": len(walk.snapshot),
            "counts": counts,
            "collection_time": round(elapsed, 6),
            "complete": not walk.timed_out,
            "errors": walk.errors,
        }
        return result

    async def _snapshot_page(
        self,
        ctx: CallContext,
        cursor: str | None,
        page_bytes: int,
        root_path: str | None,
        exclude: list[str] | str | None,
        with_hash: bool,
        one_filesystem: bool,
    ) -> dict[str, Any]:
        if not 1 <= page_bytes <= fs_listing.MAX_PAGE_BYTES:
            return error_result(
                f"page_bytes must be 1..{fs_listing.MAX_PAGE_BYTES}, got {page_bytes}"
            )
        if cursor is None:
            root = snapshot_root(root_path)
            try:
                listing = await self._start_listing(ctx, root, exclude, with_hash, one_filesystem)
            except OSError as exc:
                return error_result(f"cannot snapshot {root}: {_reason(exc)}")
        else:
            found = self._listings.get(cursor)
            if found is None:
                return error_result(
                    f"no snapshot in progress under cursor {cursor[:40]!r} (expired?)"
                )
            listing, root = found, ""
        try:
            # The page and its JSON text stay in memory until sent.
            await ctx.reserve_output(2 * page_bytes)
            records = await listing.page(page_bytes)
        except TimeoutError:
            self._listings.close(listing.cursor)
            return error_result(
                f"timed out after {ctx.timeout:g} s; snapshot is partial",
                complete=False,
                errors=listing.take_errors(),
            )
        except BaseException:
            self._listings.close(listing.cursor)
            raise
        if listing.done:
            self._listings.close(listing.cursor)
        entries = records.count(b"\0") // 2
        return {
            "status": "success",
            "message": f"{entries} entries" + ("" if listing.done else ", more to come"),
            "format": "lines",
            "root_path": root,
            "lister": listing.lister,
            "records": records.decode("utf-8", "surrogateescape"),
            "entries": entries,
            "cursor": None if listing.done else listing.cursor,
            "complete": listing.done,
            "collection_time": round(time.monotonic() - listing.started, 6),
            "errors": listing.take_errors(),
        }

    async def _start_listing(
        self,
        ctx: CallContext,
        root: str,
        exclude: list[str] | str | None,
        with_hash: bool,
        one_filesystem: bool,
    ) -> fs_listing.Listing:
        """A new listing of ``root``: ``find`` when it can, else the walk.

        :raise OSError: ``root`` cannot be read, or ``find`` cannot start.
        """
        patterns = [exclude] if isinstance(exclude, str) else list(exclude or [])
        cursor = fs_listing.Listings.new_cursor()
        root_st = os.lstat(root)
        argv = None
        if (
            not with_hash
            and stat.S_ISDIR(root_st.st_mode)
            and await ctx.run_in_thread(fs_listing.find_prints)
        ):
            argv = fs_listing.find_argv(root, patterns, one_filesystem, skipped_roots(root))
        listing: fs_listing.Listing
        if argv is not None:
            first = fs_listing.entry_record(root, root_st, None, b"")
            listing = await fs_listing.FindListing.start(
                cursor, argv, ctx.deadline, first, ctx.run_in_thread
            )
        else:
            stop = threading.Event()
            walk = Walk(root, patterns, with_hash, one_filesystem, stop, ctx.deadline)
            listing = fs_listing.WalkListing(
                cursor,
                walk_records(walk),
                stop,
                ctx.deadline,
                ctx.run_in_thread,
                walk.errors,
                lambda: walk.timed_out,
            )
        self._listings.add(listing)
        return listing


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc)
