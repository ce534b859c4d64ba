"""File tools: chunked pull and push, filesystem snapshot, guest time.

Paths in results are ``str``; names that are not valid UTF-8 are kept with
``surrogateescape`` (each undecodable byte ``0xXY`` becomes the lone surrogate
``U+DCXY``). The JSON encoder writes those as ``\\udcXY`` escapes, and the host
gets the exact original bytes back with ``os.fsencode(path)``.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import errno
import fnmatch
import hashlib
import os
import stat
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any, Literal

from adare_guest import fs_listing
from adare_guest.base64_text import Base64Text
from adare_guest.binary_transfer import (
    DEFAULT_CHUNK,
    DEFAULT_WINDOW,
    TransferRefused,
    check_transfer_params,
)
from adare_guest.config import AgentConfig
from adare_guest.tools.base import AgentState, CallContext, ToolGroup, tool

DEFAULT_CHUNK_SIZE = 1024 * 1024
MAX_CHUNK_SIZE = 64 * 1024 * 1024
HASH_BLOCK = 1024 * 1024
SKIPPED_ROOTS = ("/proc", "/sys", "/dev", "/run")
MAX_REPORTED_ERRORS = 1000
STOP_CHECK_EVERY = 256
"""Entries walked between two checks of the deadline and cancellation."""
IS_WINDOWS = sys.platform == "win32"


READ_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
"""Open guest files without blocking: a FIFO (or a file swapped for one between a
``stat`` and the ``open``) opens at once and is then refused by its ``fstat``."""
NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


class FileToolError(ValueError):
    """A file request that cannot be served (the message says why)."""


class NotRegularFile(OSError):
    """An opened guest path is a FIFO, socket, device or directory, not a regular file."""

    def __init__(self, path: str, mode: int) -> None:
        super().__init__(errno.EINVAL, f"{_kind_name(mode)}, not a regular file", path)
        self.mode = mode


def _kind_name(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISLNK, "a symbolic link"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def open_regular(path: str, flags: int = READ_FLAGS) -> tuple[int, os.stat_result]:
    """Open ``path`` with ``flags`` and return (fd, fstat) of a regular file.

    The type is judged on the open descriptor, so swapping the path between a check
    and the open cannot make the agent read a FIFO or device.

    :raise NotRegularFile: the path is something else (the fd is closed).
    :raise OSError: it cannot be opened (with ``O_NOFOLLOW``: ELOOP for a symlink).
    """
    fd = os.open(path, flags)
    try:
        st = os.fstat(fd)
    except BaseException:
        os.close(fd)
        raise
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise NotRegularFile(path, st.st_mode)
    return fd, st


def _error(message: str, **extra: Any) -> dict[str, Any]:
    return {"status": "error", "message": message, **extra}


def stat_metadata(st: os.stat_result) -> dict[str, Any]:
    """The metadata of one ``lstat`` result (snapshot ``meta`` without type/target/hash)."""
    timestamps: dict[str, float] = {
        "modified": st.st_mtime,
        "accessed": st.st_atime,
        "changed": st.st_ctime,
    }
    birth = getattr(st, "st_birthtime", None)
    if birth is not None:
        timestamps["created"] = birth
    return {
        "size": st.st_size,
        "mtime": st.st_mtime,
        "mode": st.st_mode,
        "uid": st.st_uid,
        "gid": st.st_gid,
        "inode": st.st_ino,
        "timestamps": timestamps,
    }


def file_type(mode: int) -> str:
    """``file``, ``dir``, ``symlink`` or ``other`` for an ``st_mode``."""
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISREG(mode):
        return "file"
    return "other"


def sha256_file(path: str, stop: Callable[[], bool] | None = None) -> str:
    """Hex sha256 of a regular file's content, read in 1 MiB blocks; a symlink or
    anything but a regular file at ``path`` is refused (it is not followed or opened
    for reading, so a FIFO swapped in cannot block the walk).

    :raise TimeoutError: ``stop()`` became true between two blocks.
    :raise NotRegularFile: ``path`` is not a regular file.
    :raise OSError: it cannot be read (ELOOP for a symlink).
    """
    digest = hashlib.sha256()
    fd, _st = open_regular(path, READ_FLAGS | NOFOLLOW)
    with os.fdopen(fd, "rb") as handle:
        while block := handle.read(HASH_BLOCK):
            if stop is not None and stop():
                raise TimeoutError(f"stopped while hashing {path}")
            digest.update(block)
    return digest.hexdigest()


# --------------------------------------------------------------------------- pull


PULL_HASH_BUFFER = 16 * 1024 * 1024
"""Bytes of chunks read ahead of the running hash that wait for their turn in memory."""
PULL_HASH_WAIT = 60.0
"""Seconds the last chunk waits for earlier ones still being read before re-reading."""


@dataclass
class _PullProgress:
    """Incremental hash of a file being pulled, so the last chunk costs no re-read.

    The host keeps a few chunk requests in flight, so chunks may be read out of order;
    one that is ahead waits (held in :attr:`ahead`) until the hash reaches its offset.
    """

    key: tuple[int, int, int, float]
    digest: Any = field(default_factory=hashlib.sha256)
    next_offset: int = 0
    ahead: dict[int, bytes] = field(default_factory=dict)
    broken: bool = False

    def add(self, offset: int, data: bytes) -> None:
        if self.broken or offset < self.next_offset:
            return
        self.ahead[offset] = data
        while (block := self.ahead.pop(self.next_offset, None)) is not None:
            self.digest.update(block)
            self.next_offset += len(block)
            if not block:
                break
        if sum(map(len, self.ahead.values())) > PULL_HASH_BUFFER:
            self.broken, self.ahead = True, {}  # a gap that never fills: re-read at the end


class _PullHashes:
    """A few in-flight pulls' running hashes (LRU).

    :meth:`begin` (on the event loop, in call order) and :meth:`end` bracket each chunk
    read, so the last chunk can wait for the chunks still being read before it.
    """

    def __init__(self, capacity: int = 16) -> None:
        self._items: OrderedDict[str, _PullProgress] = OrderedDict()
        self._readers: dict[str, int] = {}
        self._capacity = capacity
        self._changed = threading.Condition()

    def begin(self, path: str) -> None:
        with self._changed:
            self._readers[path] = self._readers.get(path, 0) + 1

    def end(self, path: str) -> None:
        with self._changed:
            left = self._readers.pop(path, 1) - 1
            if left:
                self._readers[path] = left
            self._changed.notify_all()

    def feed(self, path: str, key: tuple[int, int, int, float], offset: int, data: bytes) -> None:
        with self._changed:
            progress = self._items.get(path)
            if progress is None or progress.key != key or (offset == 0 and progress.next_offset):
                progress = _PullProgress(key)
                self._items[path] = progress
            self._items.move_to_end(path)
            progress.add(offset, data)
            while len(self._items) > self._capacity:
                self._items.popitem(last=False)
            self._changed.notify_all()

    def finish(self, path: str, key: tuple[int, int, int, float], size: int) -> str | None:
        """The whole file's hash, once the chunks read before this last one are fed."""

        def settled() -> bool:
            progress = self._items.get(path)
            return (
                progress is None
                or progress.key != key
                or progress.next_offset == size
                or self._readers.get(path, 0) <= 1  # nobody else is reading this file
            )

        with self._changed:
            self._changed.wait_for(settled, PULL_HASH_WAIT)
            progress = self._items.get(path)
            if progress is None or progress.key != key or progress.next_offset != size:
                return None
            del self._items[path]
        return str(progress.digest.hexdigest())


def _pull(path: str, index: int, chunk_size: int, hashes: _PullHashes) -> dict[str, Any]:
    if not 1 <= chunk_size <= MAX_CHUNK_SIZE:
        raise FileToolError(f"chunk_size must be 1..{MAX_CHUNK_SIZE}, got {chunk_size}")
    if index < 0:
        raise FileToolError(f"chunk_index must be >= 0, got {index}")
    # Symlinks are followed (pulling /etc/localtime means its target); what is opened
    # must be a regular file, judged on the descriptor.
    try:
        fd, fst = open_regular(path)
    except NotRegularFile as exc:
        return _error(
            f"{path} is {_kind_name(exc.mode)}, not a regular file",
            is_directory=stat.S_ISDIR(exc.mode),
            chunk_index=index,
        )
    with os.fdopen(fd, "rb") as handle:
        size = fst.st_size
        total = max(1, -(-size // chunk_size))
        if index >= total:
            raise FileToolError(f"chunk_index {index} out of range: {path} has {total} chunks")
        offset = index * chunk_size
        handle.seek(offset)
        data = handle.read(chunk_size)
        key = (fst.st_dev, fst.st_ino, fst.st_size, fst.st_mtime)
        hashes.feed(path, key, offset, data)
        eof = index == total - 1
        result: dict[str, Any] = {
            "status": "success",
            "chunk_index": index,
            "total_chunks": total,
            "chunk_data": Base64Text.of(data),
            "chunk_size": len(data),
            "file_size": size,
            "is_directory": False,
            "eof": eof,
        }
        if index == 0:
            result["file_metadata"] = {"path": path, **stat_metadata(fst)}
        if eof:
            digest = hashes.finish(path, key, size)
            if digest is None:
                handle.seek(0)
                whole = hashlib.sha256()
                while block := handle.read(HASH_BLOCK):
                    whole.update(block)
                digest = whole.hexdigest()
            result["sha256"] = digest
    return result


# --------------------------------------------------------------------------- push


@dataclass
class _Upload:
    temp_path: str
    total_chunks: int
    next_index: int = 0
    size: int = 0
    digest: Any = field(default_factory=hashlib.sha256)
    identity: tuple[int, int] | None = None
    """(device, inode) of the finished temporary file, checked before the rename."""


def _identity(st: os.stat_result) -> tuple[int, int]:
    return st.st_dev, st.st_ino


def validate_guest_path(guest_path: str) -> str:
    """An absolute, normalised path without ``..`` or NUL, for writing.

    :raise FileToolError: relative path, ``..`` component, NUL byte or empty.
    """
    if not guest_path or "\0" in guest_path:
        raise FileToolError("guest_path must be a non-empty path without NUL bytes")
    if not os.path.isabs(guest_path):
        raise FileToolError(f"guest_path must be absolute, got {guest_path!r}")
    if ".." in PurePath(guest_path).parts:
        raise FileToolError(f"guest_path must not contain '..': {guest_path!r}")
    normalised = os.path.normpath(guest_path)
    if normalised.rstrip("/\\") == "" or os.path.dirname(normalised) == normalised:
        raise FileToolError(f"guest_path {guest_path!r} names a root, not a file")
    return normalised


class _Uploads:
    """In-progress pushes by destination path."""

    def __init__(self) -> None:
        self._items: dict[str, _Upload] = {}
        self._lock = threading.Lock()

    def push(
        self,
        path: str,
        index: int,
        data: bytes,
        total: int,
        sha256: str | None,
        mode: int | None,
    ) -> dict[str, Any]:
        with self._lock:
            upload = self._items.get(path)
            if index == 0:
                if upload is not None:
                    _remove(upload.temp_path)
                upload = self._start(path, total)
            elif upload is None or upload.next_index != index or upload.total_chunks != total:
                expected = 0 if upload is None else upload.next_index
                raise FileToolError(
                    f"chunk {index} of {path} out of order: expected chunk {expected}"
                    + ("" if upload is None else f" of {upload.total_chunks}")
                )
            try:
                # No symlink following: another guest process may have replaced the
                # temporary file with a link to a file we must not append to.
                fd, _st = open_regular(
                    upload.temp_path, os.O_WRONLY | os.O_APPEND | NOFOLLOW | READ_FLAGS
                )
                with os.fdopen(fd, "ab") as handle:
                    handle.write(data)
                    if index == total - 1:
                        handle.flush()
                        os.fsync(handle.fileno())
                        if not IS_WINDOWS:
                            os.fchmod(fd, mode if mode is not None else 0o644)
                        upload.identity = _identity(os.fstat(fd))
            except OSError:
                self._items.pop(path, None)
                _remove(upload.temp_path)
                raise
            upload.digest.update(data)
            upload.size += len(data)
            upload.next_index = index + 1
            if index < total - 1:
                return {
                    "status": "success",
                    "message": f"chunk {index + 1}/{total} stored",
                    "chunk_index": index,
                    "total_chunks": total,
                    "complete": False,
                    "bytes_written": upload.size,
                }
            del self._items[path]
        return _finish(path, upload, sha256, mode)

    def _start(self, path: str, total: int) -> _Upload:
        directory = os.path.dirname(path)
        os.makedirs(directory, exist_ok=True)
        if os.path.isdir(path):
            raise FileToolError(f"{path} is a directory")
        temp_path = os.path.join(
            directory, f".{os.path.basename(path)}.adare-part-{os.getpid()}-{time.time_ns()}"
        )
        fd = os.open(temp_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.close(fd)
        upload = _Upload(temp_path, total)
        self._items[path] = upload
        return upload


def _finish(path: str, upload: _Upload, sha256: str | None, mode: int | None) -> dict[str, Any]:
    actual = upload.digest.hexdigest()
    if sha256 is not None and sha256.lower() != actual:
        _remove(upload.temp_path)
        return _error(
            f"sha256 mismatch for {path}: expected {sha256}, got {actual}; nothing written",
            sha256=actual,
        )
    try:
        if IS_WINDOWS:
            os.chmod(upload.temp_path, mode if mode is not None else 0o644)
        elif _identity(os.lstat(upload.temp_path)) != upload.identity:
            raise FileToolError(f"the temporary file of {path} was replaced; nothing written")
        os.replace(upload.temp_path, path)
    except (OSError, FileToolError):
        _remove(upload.temp_path)
        raise
    return {
        "status": "success",
        "message": f"{path} written ({upload.size} bytes)",
        "chunk_index": upload.next_index - 1,
        "total_chunks": upload.total_chunks,
        "complete": True,
        "bytes_written": upload.size,
        "file_size": upload.size,
        "sha256": actual,
        "path": path,
    }


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


# --------------------------------------------------------------------------- binary


def read_exactly(fd: int, n: int) -> bytes:
    """Up to ``n`` bytes from ``fd``'s current position (fewer only at the end of file)."""
    parts: list[bytes] = []
    while n > 0 and (block := os.read(fd, n)):
        parts.append(block)
        n -= len(block)
    return b"".join(parts)


class PushTarget:
    """The temporary file of a binary push, created exclusively beside ``path``.

    Its descriptor stays open from creation to the rename, so no other guest process can
    swap the file for a link; :meth:`finish` checks the name still means that file.
    """

    def __init__(self, path: str, mode: int | None) -> None:
        directory = os.path.dirname(path)
        os.makedirs(directory, exist_ok=True)
        if os.path.isdir(path):
            raise FileToolError(f"{path} is a directory")
        self.path = path
        self.mode = mode
        self.temp_path = os.path.join(
            directory, f".{os.path.basename(path)}.adare-part-{os.getpid()}-{time.time_ns()}"
        )
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW | getattr(os, "O_BINARY", 0)
        self._fd: int | None = os.open(self.temp_path, flags, 0o600)

    def write(self, data: bytes) -> None:
        """Append ``data``."""
        assert self._fd is not None, "write after finish or abandon"
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view) :]

    def finish(self) -> None:
        """Flush, set the mode and rename over :attr:`path`.

        :raise FileToolError: the temporary name no longer means our file.
        """
        fd, self._fd = self._fd, None
        assert fd is not None, "finish after finish or abandon"
        try:
            os.fsync(fd)
            if not IS_WINDOWS:
                os.fchmod(fd, self.mode if self.mode is not None else 0o644)
            identity = _identity(os.fstat(fd))
        finally:
            os.close(fd)
        try:
            if IS_WINDOWS:
                os.chmod(self.temp_path, self.mode if self.mode is not None else 0o644)
            elif _identity(os.lstat(self.temp_path)) != identity:
                raise FileToolError(f"the temporary file of {self.path} was replaced")
            os.replace(self.temp_path, self.path)
        except BaseException:
            _remove(self.temp_path)
            raise

    def abandon(self) -> None:
        """Close and remove the temporary file (nothing is written to :attr:`path`)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)
            _remove(self.temp_path)


# --------------------------------------------------------------------------- snapshot


@dataclass
class _Walk:
    root: str
    exclude: list[str]
    with_hash: bool
    one_filesystem: bool
    cancelled: threading.Event
    deadline: float
    snapshot: dict[str, dict[str, Any]] = field(default_factory=dict)
    errors: list[dict[str, str]] = field(default_factory=list)
    timed_out: bool = False

    def excluded(self, path: str, name: str) -> bool:
        for pattern in self.exclude:
            if path == pattern or path.startswith(pattern.rstrip("/\\") + os.sep):
                return True
            if fnmatch.fnmatchcase(path, pattern) or fnmatch.fnmatchcase(name, pattern):
                return True
        return False

    def error(self, path: str, exc: OSError) -> None:
        if len(self.errors) < MAX_REPORTED_ERRORS:
            self.errors.append({"path": path, "error": exc.strerror or str(exc)})

    def stopped(self) -> bool:
        if self.cancelled.is_set() or time.monotonic() > self.deadline:
            self.timed_out = True
            return True
        return False


def _scan(walk: _Walk, directory: str) -> Iterator[tuple[str, os.stat_result, bool]]:
    """(path, lstat, is_dir) of the entries of ``directory``."""
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError as exc:
                    walk.error(entry.path, exc)
                    continue
                yield entry.path, st, stat.S_ISDIR(st.st_mode)
    except OSError as exc:
        walk.error(directory, exc)


_TYPE_BY_FORMAT = {stat.S_IFREG: "file", stat.S_IFDIR: "dir", stat.S_IFLNK: "symlink"}


def _entry_meta(walk: _Walk, path: str, st: os.stat_result) -> dict[str, Any]:
    # One dict literal per entry: this is the hot loop of a snapshot.
    kind = _TYPE_BY_FORMAT.get(stat.S_IFMT(st.st_mode), "other")
    mtime = st.st_mtime
    timestamps = {"modified": mtime, "accessed": st.st_atime, "changed": st.st_ctime}
    birth = getattr(st, "st_birthtime", None)
    if birth is not None:
        timestamps["created"] = birth
    meta: dict[str, Any] = {
        "type": kind,
        "size": st.st_size,
        "mtime": mtime,
        "mode": st.st_mode,
        "uid": st.st_uid,
        "gid": st.st_gid,
        "inode": st.st_ino,
        "timestamps": timestamps,
    }
    if kind == "symlink":
        try:
            meta["target"] = os.readlink(path)
        except OSError as exc:
            walk.error(path, exc)
    elif kind == "file" and walk.with_hash:
        try:
            meta["sha256"] = sha256_file(path, walk.stopped)
        except OSError as exc:
            walk.error(path, exc)
        except TimeoutError:
            walk.timed_out = True
    return meta


def walk_tree(walk: _Walk) -> None:
    """Fill ``walk.snapshot`` from ``walk.root`` (depth first, no symlink following)."""
    snapshot = walk.snapshot
    for path, st in walk_entries(walk):
        snapshot[path] = _entry_meta(walk, path, st)


def _walk_records(walk: _Walk) -> Iterator[bytes]:
    """The :mod:`~adare_guest.fs_listing` records of :func:`walk_entries`."""
    for path, st in walk_entries(walk):
        kind = _TYPE_BY_FORMAT.get(stat.S_IFMT(st.st_mode), "other")
        target, sha256 = b"", None
        try:
            if kind == "symlink":
                target = os.readlink(os.fsencode(path))
            elif kind == "file" and walk.with_hash:
                sha256 = sha256_file(path, walk.stopped)
        except OSError as exc:
            walk.error(path, exc)
        except TimeoutError:
            walk.timed_out = True
        yield fs_listing.entry_record(path, st, sha256, target)


def walk_entries(walk: _Walk) -> Iterator[tuple[str, os.stat_result]]:
    """``(path, lstat)`` of ``walk.root`` and of every entry under it that is neither
    skipped nor excluded (depth first, no symlink following), until ``walk.stopped()``.

    :raise OSError: ``walk.root`` cannot be read (at the first ``next``).
    """
    root_st = os.lstat(walk.root)
    yield walk.root, root_st
    if not stat.S_ISDIR(root_st.st_mode):
        return
    root_dev = root_st.st_dev
    filtering = bool(walk.exclude)
    skip_roots = _skipped_roots(walk.root)
    stack = [walk.root]
    seen = 0
    while stack:
        directory = stack.pop()
        for path, st, is_dir in _scan(walk, directory):
            seen += 1
            if seen % STOP_CHECK_EVERY == 0 and walk.stopped():
                return
            if path in skip_roots or (filtering and walk.excluded(path, os.path.basename(path))):
                continue
            yield path, st
            if is_dir and not (walk.one_filesystem and st.st_dev != root_dev):
                stack.append(path)
        if walk.timed_out:
            return


def _snapshot_root(root_path: str | None) -> str:
    """The normalised walk root (``/``, or ``C:\\`` on Windows, by default)."""
    if not root_path:
        return "C:\\" if IS_WINDOWS else "/"
    root = os.path.normpath(root_path)
    if IS_WINDOWS and len(root) == 2 and root[1] == ":":
        root += "\\"
    return root


def _skipped_roots(root: str) -> tuple[str, ...]:
    return () if IS_WINDOWS else tuple(p for p in SKIPPED_ROOTS if p != root)


# --------------------------------------------------------------------------- group


class FileTools(ToolGroup):
    """Chunked file transfer, filesystem snapshots and the guest clock."""

    def __init__(self, config: AgentConfig, state: AgentState) -> None:
        super().__init__(config, state)
        self._listings = fs_listing.Listings()
        self._pull_hashes = _PullHashes()
        self._uploads = _Uploads()

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
                return _error(
                    f"cannot read {guest_path}: {exc}", chunk_index=chunk_index, is_directory=False
                )
        self._pull_hashes.begin(guest_path)
        try:
            return await ctx.run_in_thread(
                _pull, guest_path, chunk_index, chunk_size, self._pull_hashes
            )
        except (OSError, FileToolError) as exc:
            return _error(
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
            return _error(f"cannot write {guest_path}: {_reason(exc)}", chunk_index=chunk_index)

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
            return _error("this connection carries no binary messages; use pull_file_chunk")
        problem = check_transfer_params(transfer_id, chunk_size, window)
        if problem is not None:
            return _error(problem, is_directory=False)
        try:
            # Symlinks are followed, as by pull_file_chunk; the descriptor must be a file.
            fd, fst = await ctx.run_in_thread(open_regular, guest_path)
        except NotRegularFile as exc:
            return _error(
                f"{guest_path} is {_kind_name(exc.mode)}, not a regular file",
                is_directory=stat.S_ISDIR(exc.mode),
            )
        except OSError as exc:
            return _error(f"cannot read {guest_path}: {_reason(exc)}", is_directory=False)
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
            return _error(f"cannot pull {guest_path}: {exc}", is_directory=False)
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
            return _error("this connection carries no binary messages; use push_file_chunk")
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
            return _error(f"cannot write {guest_path}: {_reason(exc)}")
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
            return _error(f"cannot write {guest_path}: {exc}")
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
        root = _snapshot_root(root_path)
        patterns = [exclude] if isinstance(exclude, str) else list(exclude or [])
        walk = _Walk(root, patterns, hash, one_filesystem, ctx.cancelled, ctx.deadline)
        started = time.monotonic()
        try:
            await ctx.run_in_thread(walk_tree, walk)
        except OSError as exc:
            return _error(f"cannot snapshot {root}: {_reason(exc)}")
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
            return _error(f"page_bytes must be 1..{fs_listing.MAX_PAGE_BYTES}, got {page_bytes}")
        if cursor is None:
            root = _snapshot_root(root_path)
            try:
                listing = await self._start_listing(ctx, root, exclude, with_hash, one_filesystem)
            except OSError as exc:
                return _error(f"cannot snapshot {root}: {_reason(exc)}")
        else:
            found = self._listings.get(cursor)
            if found is None:
                return _error(f"no snapshot in progress under cursor {cursor[:40]!r} (expired?)")
            listing, root = found, ""
        try:
            # The page and its JSON text stay in memory until sent.
            await ctx.reserve_output(2 * page_bytes)
            records = await listing.page(page_bytes)
        except TimeoutError:
            self._listings.close(listing.cursor)
            return _error(
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
            argv = fs_listing.find_argv(root, patterns, one_filesystem, _skipped_roots(root))
        listing: fs_listing.Listing
        if argv is not None:
            first = fs_listing.entry_record(root, root_st, None, b"")
            listing = await fs_listing.FindListing.start(
                cursor, argv, ctx.deadline, first, ctx.run_in_thread
            )
        else:
            stop = threading.Event()
            walk = _Walk(root, patterns, with_hash, one_filesystem, stop, ctx.deadline)
            listing = fs_listing.WalkListing(
                cursor,
                _walk_records(walk),
                stop,
                ctx.deadline,
                ctx.run_in_thread,
                walk.errors,
                lambda: walk.timed_out,
            )
        self._listings.add(listing)
        return listing

    @tool(timeout=10)
    async def get_timestamp(self, ctx: CallContext, *, use_local: bool = False) -> dict[str, Any]:
        """The guest's clock: epoch seconds, ISO 8601 in UTC (and local time if asked)."""
        now = time.time()
        utc = dt.datetime.fromtimestamp(now, dt.timezone.utc)
        result: dict[str, Any] = {
            "status": "success",
            "timestamp": now,
            "timezone": "UTC",
            "iso_format": utc.isoformat(),
        }
        if use_local:
            local = utc.astimezone()
            offset = local.utcoffset() or dt.timedelta()
            result["timezone"] = utc_offset_text(offset)
            result["timezone_name"] = local.tzname() or "local"
            result["local_time"] = local.isoformat()
            result["local_timezone"] = result["timezone_name"]
            result["utc_offset_seconds"] = int(offset.total_seconds())
        return result


def utc_offset_text(offset: dt.timedelta) -> str:
    """``+05:30``, ``-03:00``, ``+00:00`` (seconds, where a zone has them, are dropped).

    >>> utc_offset_text(dt.timedelta(hours=5, minutes=30))
    '+05:30'
    """
    minutes = int(offset.total_seconds()) // 60
    sign = "-" if minutes < 0 else "+"
    hours, rest = divmod(abs(minutes), 60)
    return f"{sign}{hours:02d}:{rest:02d}"


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc)
