"""Filesystem listings in the record format, page by page (``get_filesystem_snapshot``
with ``format="lines"``).

One record per entry, every field but the last two separated by one space::

    TYPE SIZE PERM UID GID INODE MTIME ATIME CTIME SHA256 PATH\\0TARGET\\0

``TYPE`` is GNU find's ``%y`` letter (``f`` file, ``d`` dir, ``l`` symlink, ``b``
``c`` ``p`` ``s`` devices, FIFO, socket); ``PERM`` the octal permission bits
(``st_mode & 0o7777``); the times are ``SECONDS.FRACTION`` (nanoseconds, the host
reads the first nine digits); ``SHA256`` is ``-`` unless hashes were asked for;
``PATH`` runs to the first NUL (names may hold spaces and newlines, never NUL) and
``TARGET`` (empty but for a symlink) to the next. The bytes are the file system's
own: the page travels as text decoded with ``surrogateescape``.

Two listers write it: GNU ``find -printf`` (no Python per entry: as fast as
``find`` itself) when the guest has it and the request fits its expression
language, else an ``os.scandir`` walk in a worker thread (also the only one that
hashes). A listing lives between the calls of one snapshot under a cursor; it holds
at most one page (``find`` reads the next one ahead while the last travels to the host,
then waits on its full pipe), dies at its deadline, and at most
:data:`MAX_OPEN_LISTINGS` are open at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import select
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any

FIND_FORMAT = "%y %s %m %U %G %i %T@ %A@ %C@ - %p\\0%l\\0"
"""The ``find -printf`` format of one record (see the module docstring)."""
DEFAULT_PAGE_BYTES = 4 * 1024 * 1024
MAX_PAGE_BYTES = 32 * 1024 * 1024
MAX_OPEN_LISTINGS = 4
MAX_ERROR_LINE = 4096
READ_BLOCK = 1024 * 1024
PIPE_BYTES = 1024 * 1024
# fcntl names it from Python 3.10 on; 1031 is its value on Linux (the guest's 3.9 lacks it).
_F_SETPIPE_SZ: int = getattr(fcntl, "F_SETPIPE_SZ", 1031)
_LETTERS = {
    stat.S_IFREG: b"f",
    stat.S_IFDIR: b"d",
    stat.S_IFLNK: b"l",
    stat.S_IFBLK: b"b",
    stat.S_IFCHR: b"c",
    stat.S_IFIFO: b"p",
    stat.S_IFSOCK: b"s",
}
_FIND_ONLY_PLAIN = ("[", "\\")
"""Glob syntax whose meaning differs between Python's fnmatch and find's: walk instead."""


def _stamp(ns: int) -> bytes:
    seconds, fraction = divmod(ns, 1_000_000_000)
    return b"%d.%09d" % (seconds, fraction)


def entry_record(path: str, st: os.stat_result, sha256: str | None, target: bytes) -> bytes:
    """One record for ``path`` (its ``lstat`` result ``st``), as ``find -printf`` writes it.

    >>> st = os.stat_result((0o100644, 7, 0, 1, 0, 0, 5, 1, 2, 3, 1, 2, 3, 2_000_000_000,
    ...                      1_500_000_000, 3_000_000_001))
    >>> entry_record("/a b", st, None, b"")
    b'f 5 644 0 0 7 1.500000000 2.000000000 3.000000001 - /a b\\x00\\x00'
    """
    letter = _LETTERS.get(stat.S_IFMT(st.st_mode), b"?")
    return b"%s %d %o %d %d %d %s %s %s %s %s\0%s\0" % (
        letter,
        st.st_size,
        stat.S_IMODE(st.st_mode),
        st.st_uid,
        st.st_gid,
        st.st_ino,
        _stamp(st.st_mtime_ns),
        _stamp(st.st_atime_ns),
        _stamp(st.st_ctime_ns),
        sha256.encode("ascii") if sha256 else b"-",
        os.fsencode(path),
        target,
    )


def record_boundary(data: bytes | bytearray, limit: int | None = None) -> int:
    """Where the last whole record of ``data`` (which starts at a record) ends, within
    its first ``limit`` bytes if given.

    >>> record_boundary(b"a\\0b\\0c\\0"), record_boundary(b"a\\0b\\0c\\0d\\0")
    (4, 8)
    >>> record_boundary(b"a\\0b\\0c\\0d\\0", 7)
    4
    """
    end = data.rfind(b"\0", 0, len(data) if limit is None else limit)
    if end < 0:
        return 0
    if data.count(b"\0", 0, end + 1) % 2:
        end = data.rfind(b"\0", 0, end)
    return end + 1


_find_prints: bool | None = None


def find_prints() -> bool:
    """Whether this guest's ``find`` is GNU find with ``-printf`` (asked once)."""
    global _find_prints
    if _find_prints is None:
        _find_prints = False
        if sys.platform != "win32" and shutil.which("find"):
            with contextlib.suppress(OSError, subprocess.SubprocessError):
                probe = subprocess.run(
                    ["find", "/", "-maxdepth", "0", "-printf", "%y %T@\\0"],
                    capture_output=True,
                    timeout=30,
                    check=False,
                    env=_find_env(),
                )
                _find_prints = probe.returncode == 0 and probe.stdout.startswith(b"d ")
    return _find_prints


def _find_env() -> dict[str, str]:
    # C locale: a decimal point in %T@ whatever the guest's locale, parseable errors.
    return {"PATH": os.environ.get("PATH", os.defpath), "LC_ALL": "C"}


def find_argv(
    root: str, exclude: list[str], one_filesystem: bool, skipped: tuple[str, ...]
) -> list[str] | None:
    """The ``find`` command listing everything under ``root`` but ``root`` itself (its
    record comes from ``lstat``), or None when ``exclude`` needs the Python walk's
    exact semantics (see :meth:`adare_guest.fs_walk.Walk.excluded`).

    >>> find_argv("/", ["*.log"], True, ("/proc",))[:-1]  # doctest: +NORMALIZE_WHITESPACE
    ['find', '/', '-mindepth', '1', '-xdev', '(', '-path', '/proc', '-o', '-path', '*.log',
     '-o', '-name', '*.log', ')', '-prune', '-o', '-printf']
    >>> find_argv("/usr", ["/"], True, ()) is None   # '/' excludes all: only the walk says so
    True
    """
    if root.startswith(("-", "//")) or any(c in root for c in _FIND_ONLY_PLAIN):
        return None
    terms: list[str] = []
    for path in skipped:
        terms += ["-o", "-path", path]
    for pattern in exclude:
        prefix = pattern.rstrip("/\\")
        if (
            not prefix
            or prefix != pattern
            or any(c in pattern for c in _FIND_ONLY_PLAIN)
            or root == prefix
            or root.startswith(prefix + "/")
        ):
            return None
        terms += ["-o", "-path", pattern]
        if "/" not in pattern:
            terms += ["-o", "-name", pattern]
    argv = ["find", root, "-mindepth", "1"] + (["-xdev"] if one_filesystem else [])
    if terms:
        argv += ["(", *terms[1:], ")", "-prune", "-o"]
    return [*argv, "-printf", FIND_FORMAT]


def find_error(line: str) -> dict[str, str]:
    """``{"path", "error"}`` from one line of find's stderr (C locale).

    >>> find_error("find: '/root/x': Permission denied")
    {'path': '/root/x', 'error': 'Permission denied'}
    """
    if line.startswith("find: '") and "': " in line:
        path, _, error = line[len("find: '") :].rpartition("': ")
        return {"path": path, "error": error}
    return {"path": "", "error": line}


class Listing:
    """One snapshot being listed: whole records, a page at a time."""

    def __init__(self, cursor: str, lister: str, deadline: float, max_errors: int) -> None:
        self.cursor = cursor
        self.lister = lister
        self.deadline = deadline
        self.started = time.monotonic()
        self.errors: list[dict[str, str]] = []
        self.max_errors = max_errors
        self.timed_out = False
        self.done = False

    async def page(self, limit: int) -> bytes:
        """The next records, about ``limit`` bytes (whole records; empty when done).

        :raise TimeoutError: the listing's deadline passed (it is then closed).
        """
        raise NotImplementedError

    def take_errors(self) -> list[dict[str, str]]:
        """The errors met since the last call."""
        errors, self.errors = self.errors, []
        return errors

    def add_error(self, error: dict[str, str]) -> None:
        if self.max_errors > 0:
            self.max_errors -= 1
            self.errors.append(error)

    def close(self) -> None:
        """Stop listing and free what the listing holds (idempotent)."""
        self.done = True


class WalkListing(Listing):
    """Records from a Python walk (``os.scandir``), produced in a worker thread."""

    def __init__(
        self,
        cursor: str,
        records: Iterator[bytes],
        stop: threading.Event,
        deadline: float,
        run_in_thread: Callable[..., Any],
        walk_errors: list[dict[str, str]],
        walk_timed_out: Callable[[], bool],
    ) -> None:
        super().__init__(cursor, "scandir", deadline, 0)
        self._walk_timed_out = walk_timed_out
        self._records = records
        self._stop = stop
        self._run_in_thread = run_in_thread
        self._walk_errors = walk_errors
        self._lock = threading.Lock()

    def _fill(self, limit: int) -> bytes:
        with self._lock:
            out = bytearray()
            for record in self._records:
                out += record
                if len(out) >= limit:
                    return bytes(out)
            self.done = True
            return bytes(out)

    async def page(self, limit: int) -> bytes:
        data: bytes = await self._run_in_thread(self._fill, limit)
        if self._walk_timed_out():
            self.timed_out = True
            self.close()
            raise TimeoutError
        return data

    def take_errors(self) -> list[dict[str, str]]:
        errors = list(self._walk_errors)
        self._walk_errors.clear()
        return errors

    def close(self) -> None:
        self._stop.set()
        super().close()


class FindListing(Listing):
    """Records straight from ``find -printf``: no Python per entry.

    A page is read in one worker-thread call (``poll`` + ``read`` of both pipes), not
    one event-loop wake-up per pipe buffer. Once a page is cut, the next one is read
    ahead (up to the same size) while this one travels and the host parses it: ``find``
    never waits for the round trip, and the listing still holds one page at most.
    """

    def __init__(
        self,
        cursor: str,
        proc: subprocess.Popen[bytes],
        deadline: float,
        first: bytes,
        run_in_thread: Callable[..., Any],
    ) -> None:
        super().__init__(cursor, "find", deadline, 1000)
        self._proc = proc
        self._held = bytearray(first)
        self._run_in_thread = run_in_thread
        self._pending_error = b""
        self._lock = threading.Lock()
        self._eof = False  # find's stdout ended (``done``: the last page was cut, or closed)
        self._ahead: asyncio.Future[None] | None = None

    @classmethod
    async def start(
        cls,
        cursor: str,
        argv: list[str],
        deadline: float,
        first: bytes,
        run_in_thread: Callable[..., Any],
    ) -> FindListing:
        """Start ``find`` (own session, so a timeout kills just it); ``first`` is the
        root's record (``find_argv`` leaves the root out).

        :raise OSError: it cannot be started.
        """
        proc: subprocess.Popen[bytes] = await run_in_thread(_start_find, argv)
        return cls(cursor, proc, deadline, first, run_in_thread)

    def _fill(self, limit: int, *, cut: bool = True) -> bytes:
        """Read until ``limit`` bytes (and a whole record) are held or find ended; then,
        with ``cut``, take the page (else keep them: the read-ahead)."""
        with self._lock:
            if self.done:  # closed (its pipes too) while this page waited for the lock
                return b""
            out, err = self._proc.stdout, self._proc.stderr
            assert out is not None and err is not None
            poller = select.poll()
            poller.register(out.fileno(), select.POLLIN)
            if not err.closed:
                poller.register(err.fileno(), select.POLLIN)
            held = self._held
            # A page holds whole records: past ``limit`` only to finish one longer than it.
            while not self._eof and (len(held) < limit or (cut and record_boundary(held) == 0)):
                remaining = self.deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError
                want = min(READ_BLOCK, limit - len(held) if len(held) < limit else 512)
                for fd, _event in poller.poll(remaining * 1000):
                    if fd == out.fileno():
                        data = os.read(fd, want)
                        held += data
                        self._eof = not data
                    elif data := os.read(fd, READ_BLOCK):
                        self._errors_from(data)
                    else:
                        poller.unregister(fd)
                        err.close()
            if not cut:
                return b""
            # Whole records up to ``limit`` (a read-ahead for a larger page may hold more).
            if self._eof and len(held) <= limit:
                end = len(held)
            else:
                end = record_boundary(held, limit) or record_boundary(held)
            page = bytes(held[:end])
            del held[:end]
            if self._eof and not held:
                self.done = True
                self._drain_errors(poller, err)
            return page

    def _errors_from(self, data: bytes) -> None:
        *lines, rest = (self._pending_error + data).split(b"\n")
        self._pending_error = rest[-MAX_ERROR_LINE:]
        for line in lines:
            # At find's end an empty read flushes the unfinished line; when there is
            # none, that flush is an empty line, which is no error.
            if line.strip():
                self.add_error(find_error(os.fsdecode(line[:MAX_ERROR_LINE])))

    def _drain_errors(self, poller: select.poll, err: Any) -> None:
        deadline = time.monotonic() + 5
        while not err.closed and time.monotonic() < deadline:
            if not poller.poll(max(0.0, deadline - time.monotonic()) * 1000):
                break
            data = os.read(err.fileno(), READ_BLOCK)
            if not data:
                err.close()
            self._errors_from(data or b"\n")
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._proc.wait(5)

    async def page(self, limit: int) -> bytes:
        ahead, self._ahead = self._ahead, None
        try:
            if ahead is not None:
                await ahead
            data: bytes = await self._run_in_thread(self._fill, limit)
        except TimeoutError:
            self.timed_out = True
            self.close()
            raise
        if not self.done:
            self._ahead = asyncio.ensure_future(self._run_in_thread(self._fill, limit, cut=False))
            # Awaited by the next page; a listing abandoned or closed before that must not
            # leave an exception unretrieved (the next page, if any, sees it again).
            self._ahead.add_done_callback(_retrieve)
        return data

    def close(self) -> None:
        if self._proc.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._proc.pid, signal.SIGKILL)
            # Reaped off the loop: a killed find exits at once, but not inside this call.
            threading.Thread(target=self._proc.wait, daemon=True).start()
        self._held = bytearray()
        super().close()
        # Both pipes are closed (else they leak until the GC, with a ResourceWarning). A
        # page being read holds the lock: its worker thread closes them when it ends (at
        # EOF, find is dead), so no fd is closed under a poll that may see it reused.
        if self._lock.acquire(blocking=False):
            try:
                self._close_pipes()
            finally:
                self._lock.release()
        else:
            threading.Thread(target=self._close_pipes_after_page, daemon=True).start()

    def _close_pipes_after_page(self) -> None:
        with self._lock:
            self._close_pipes()

    def _close_pipes(self) -> None:
        for pipe in (self._proc.stdout, self._proc.stderr):
            if pipe is not None:
                pipe.close()


def _retrieve(future: asyncio.Future[None]) -> None:
    if not future.cancelled():
        future.exception()


def _start_find(argv: list[str]) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_find_env(),
        start_new_session=True,
    )
    assert proc.stdout is not None
    with contextlib.suppress(OSError):
        fcntl.fcntl(proc.stdout.fileno(), _F_SETPIPE_SZ, PIPE_BYTES)
    return proc


class Listings:
    """The open listings of one agent, by cursor: bounded in number, closed at deadline."""

    def __init__(self, limit: int = MAX_OPEN_LISTINGS) -> None:
        self._open: OrderedDict[str, Listing] = OrderedDict()
        self._limit = limit

    @staticmethod
    def new_cursor() -> str:
        return uuid.uuid4().hex

    def add(self, listing: Listing) -> None:
        while len(self._open) >= self._limit:
            _cursor, oldest = self._open.popitem(last=False)
            oldest.close()
        self._open[listing.cursor] = listing
        delay = max(0.0, listing.deadline - time.monotonic())
        asyncio.get_running_loop().call_later(delay + 1, self.close, listing.cursor)

    def get(self, cursor: str) -> Listing | None:
        return self._open.get(cursor)

    def close(self, cursor: str) -> None:
        listing = self._open.pop(cursor, None)
        if listing is not None:
            listing.close()
