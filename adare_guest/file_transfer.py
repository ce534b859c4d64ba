"""The guest side of moving files: chunked pulls and pushes, binary push targets.

``pull_file_chunk``/``push_file_chunk`` move base64 chunks inside tool results
(:func:`pull_chunk`, :class:`Uploads`); ``pull_file``/``push_file`` move binary
messages (:mod:`adare_guest.binary_transfer`), reading with :func:`read_exactly` and
writing into a :class:`PushTarget`. A push always writes a temporary file created
exclusively beside its target and renames it into place once complete (and, for
chunks, once its sha256 matches), so a reader never sees half a file.
"""

from __future__ import annotations

import hashlib
import os
import stat
import sys
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any

from adare_guest.base64_text import Base64Text
from adare_guest.regular_files import (
    HASH_BLOCK,
    NOFOLLOW,
    READ_FLAGS,
    NotRegularFile,
    kind_name,
    open_regular,
    stat_metadata,
)

DEFAULT_CHUNK_SIZE = 1024 * 1024
MAX_CHUNK_SIZE = 64 * 1024 * 1024
IS_WINDOWS = sys.platform == "win32"


class FileToolError(ValueError):
    """A file request that cannot be served (the message says why)."""


def error_result(message: str, **extra: Any) -> dict[str, Any]:
    """A tool's ``status=error`` result saying ``message`` (with ``extra`` keys)."""
    return {"status": "error", "message": message, **extra}


PULL_HASH_BUFFER = 16 * 1024 * 1024
"""Bytes of chunks read ahead of the running hash that wait for their turn in memory."""
PULL_HASH_WAIT = 60.0
"""Seconds the last chunk waits for earlier ones still being read before re-reading."""


@dataclass
class PullProgress:
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


class PullHashes:
    """A few in-flight pulls' running hashes (LRU).

    :meth:`begin` (on the event loop, in call order) and :meth:`end` bracket each chunk
    read, so the last chunk can wait for the chunks still being read before it.
    """

    def __init__(self, capacity: int = 16) -> None:
        self._items: OrderedDict[str, PullProgress] = OrderedDict()
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
                progress = PullProgress(key)
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


def pull_chunk(path: str, index: int, chunk_size: int, hashes: PullHashes) -> dict[str, Any]:
    if not 1 <= chunk_size <= MAX_CHUNK_SIZE:
        raise FileToolError(f"chunk_size must be 1..{MAX_CHUNK_SIZE}, got {chunk_size}")
    if index < 0:
        raise FileToolError(f"chunk_index must be >= 0, got {index}")
    # Symlinks are followed (pulling /etc/localtime means its target); what is opened
    # must be a regular file, judged on the descriptor.
    try:
        fd, fst = open_regular(path)
    except NotRegularFile as exc:
        return error_result(
            f"{path} is {kind_name(exc.mode)}, not a regular file",
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


class Uploads:
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
        return error_result(
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
