"""The stock ``standard`` collection: checks on files that most scenarios need.

Run as ``standard.<name>`` without uploading anything, e.g.
``guest.run_test("standard.content_contains", path="/etc/hostname", text="debian")``.
A missing file fails a check on it (FAILED); a check that cannot be made
(wrong parameter, a directory where a file is expected) is an ERROR.
"""

from __future__ import annotations

import datetime
import hashlib
import os
import re
import stat
from collections.abc import Callable

from adare_guest.testfunctions import TestContext, testfunction

_FILE_TYPES = {"file": stat.S_ISREG, "dir": stat.S_ISDIR, "symlink": stat.S_ISLNK}
_TIMESTAMP_FIELDS = {
    "mtime": "st_mtime",
    "atime": "st_atime",
    "ctime": "st_ctime",
    "birthtime": "st_birthtime",
}
_SNIPPET = 200


def _snippet(text: str) -> str:
    if len(text) <= _SNIPPET:
        return repr(text)
    return f"{text[:_SNIPPET]!r}... ({len(text)} chars)"


def _lstat(ctx: TestContext, path: str) -> os.stat_result:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        ctx.fail(f"{path} does not exist")
    except OSError as exc:
        ctx.error_if(True, f"cannot stat {path}: {exc}")
        raise


def _read_text(ctx: TestContext, path: str, encoding: str) -> str:
    ctx.error_if(os.path.isdir(path), f"{path} is a directory, not a file")
    try:
        with open(path, encoding=encoding, errors="replace", newline="") as handle:
            return handle.read()
    except FileNotFoundError:
        ctx.fail(f"{path} does not exist")
    except (OSError, LookupError) as exc:
        ctx.error_if(True, f"cannot read {path}: {exc}")
        raise


@testfunction(description="path exists (optionally of type file, dir or symlink)")
def file_exists(ctx: TestContext, path: str, type: str | None = None) -> str:
    ctx.error_if(
        type is not None and type not in _FILE_TYPES,
        f"type must be one of {sorted(_FILE_TYPES)}, got {type!r}",
    )
    st = _lstat(ctx, path)
    if type is not None:
        ctx.fail_if(
            not _FILE_TYPES[type](st.st_mode),
            f"{path} exists but is not a {type} (mode {stat.filemode(st.st_mode)})",
        )
    return f"{path} exists ({stat.filemode(st.st_mode)}, {st.st_size} bytes)"


@testfunction(description="path does not exist (not even as a dangling symlink)")
def file_absent(ctx: TestContext, path: str) -> str:
    ctx.fail_if(os.path.lexists(path), f"{path} exists")
    return f"{path} is absent"


@testfunction(description="the file's text equals `expected`")
def content_equals(ctx: TestContext, path: str, expected: str, encoding: str = "utf-8") -> str:
    content = _read_text(ctx, path, encoding)
    ctx.fail_if(
        content != expected, f"{path} holds {_snippet(content)}, expected {_snippet(expected)}"
    )
    return f"{path} holds the expected {len(expected)} characters"


@testfunction(description="the file's text contains `text`")
def content_contains(ctx: TestContext, path: str, text: str, encoding: str = "utf-8") -> str:
    content = _read_text(ctx, path, encoding)
    ctx.fail_if(
        text not in content,
        f"{path} does not contain {_snippet(text)}; it holds {_snippet(content)}",
    )
    return f"{path} contains {_snippet(text)}"


@testfunction(description="the file's text matches the regular expression `pattern` (re.search)")
def content_matches(
    ctx: TestContext,
    path: str,
    pattern: str,
    encoding: str = "utf-8",
    ignore_case: bool = False,
    multiline: bool = False,
) -> str:
    flags = (re.IGNORECASE if ignore_case else 0) | (re.MULTILINE if multiline else 0)
    try:
        regex = re.compile(pattern, flags)
    except re.error as exc:
        ctx.error_if(True, f"bad regular expression {pattern!r}: {exc}")
        raise
    content = _read_text(ctx, path, encoding)
    match = regex.search(content)
    ctx.fail_if(match is None, f"{path} has no match for /{pattern}/; it holds {_snippet(content)}")
    assert match is not None
    return f"{path} matches /{pattern}/ at offset {match.start()}: {_snippet(match.group(0))}"


@testfunction(description="the file's sha256 (hex) equals `sha256`")
def sha256_equals(ctx: TestContext, path: str, sha256: str) -> str:
    wanted = sha256.strip().lower()
    ctx.error_if(
        re.fullmatch(r"[0-9a-f]{64}", wanted) is None,
        f"sha256 must be 64 hex digits, got {sha256!r}",
    )
    ctx.error_if(os.path.isdir(path), f"{path} is a directory, not a file")
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    except FileNotFoundError:
        ctx.fail(f"{path} does not exist")
    except OSError as exc:
        ctx.error_if(True, f"cannot read {path}: {exc}")
    actual = digest.hexdigest()
    ctx.fail_if(actual != wanted, f"{path} has sha256 {actual}, expected {wanted}")
    return f"{path} has sha256 {actual}"


def _parse_mode(ctx: TestContext, mode: int | str) -> int:
    if isinstance(mode, int):
        return mode
    text = mode.strip().lower().removeprefix("0o")
    ctx.error_if(
        re.fullmatch(r"[0-7]{1,4}", text) is None,
        f"mode must be an int or an octal string like '0644', got {mode!r}",
    )
    return int(text, 8)


@testfunction(description="the permission bits (incl. setuid/setgid/sticky) equal `mode`")
def mode_equals(ctx: TestContext, path: str, mode: int | str) -> str:
    wanted = _parse_mode(ctx, mode)
    st = _lstat(ctx, path)
    actual = stat.S_IMODE(st.st_mode)
    ctx.fail_if(
        actual != wanted,
        f"{path} has mode {actual:04o} ({stat.filemode(st.st_mode)}), expected {wanted:04o}",
    )
    return f"{path} has mode {actual:04o}"


@testfunction(description="the owner matches (any of user, group names or uid, gid)")
def owner_equals(
    ctx: TestContext,
    path: str,
    user: str | None = None,
    group: str | None = None,
    uid: int | None = None,
    gid: int | None = None,
) -> str:
    ctx.error_if(
        user is None and group is None and uid is None and gid is None,
        "give at least one of user, group, uid, gid",
    )
    st = _lstat(ctx, path)
    if user is not None or group is not None:
        try:
            import grp
            import pwd
        except ImportError:
            ctx.error_if(True, "user and group names need pwd/grp (not available on this OS)")
            raise
        if user is not None:
            wanted_uid = _lookup_id(ctx, lambda: pwd.getpwnam(user).pw_uid, f"user {user!r}")
            ctx.fail_if(
                st.st_uid != wanted_uid,
                f"{path} is owned by uid {st.st_uid}, expected {user} ({wanted_uid})",
            )
        if group is not None:
            wanted_gid = _lookup_id(ctx, lambda: grp.getgrnam(group).gr_gid, f"group {group!r}")
            ctx.fail_if(
                st.st_gid != wanted_gid,
                f"{path} has gid {st.st_gid}, expected {group} ({wanted_gid})",
            )
    ctx.fail_if(uid is not None and st.st_uid != uid, f"{path} has uid {st.st_uid}, expected {uid}")
    ctx.fail_if(gid is not None and st.st_gid != gid, f"{path} has gid {st.st_gid}, expected {gid}")
    return f"{path} is owned by {st.st_uid}:{st.st_gid}"


def _lookup_id(ctx: TestContext, lookup: Callable[[], int], what: str) -> int:
    try:
        return lookup()
    except KeyError:
        ctx.error_if(True, f"no such {what} on this system")
        raise


def _parse_time(ctx: TestContext, value: float | int | str) -> float:
    if isinstance(value, (int, float)):
        return float(value)
    try:
        parsed = datetime.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        ctx.error_if(True, f"expected must be epoch seconds or ISO 8601, got {value!r}")
        raise
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=datetime.timezone.utc)
    return parsed.timestamp()


@testfunction(
    description="a timestamp (mtime, atime, ctime, birthtime) is within `tolerance` "
    "seconds of `expected` (epoch seconds or ISO 8601; naive = UTC)"
)
def timestamp_within(
    ctx: TestContext,
    path: str,
    expected: float | int | str,
    field: str = "mtime",
    tolerance: float = 2.0,
) -> str:
    ctx.error_if(
        field not in _TIMESTAMP_FIELDS,
        f"field must be one of {sorted(_TIMESTAMP_FIELDS)}, got {field!r}",
    )
    ctx.error_if(tolerance < 0, f"tolerance must be >= 0, got {tolerance!r}")
    wanted = _parse_time(ctx, expected)
    st = _lstat(ctx, path)
    recorded = getattr(st, _TIMESTAMP_FIELDS[field], None)
    ctx.error_if(recorded is None, f"this OS/filesystem does not record {field}")
    actual = float(recorded)  # type: ignore[arg-type]  # None excluded just above
    delta = actual - wanted
    ctx.fail_if(
        abs(delta) > tolerance,
        f"{path} {field} is {actual:.3f}, {delta:+.3f} s from {wanted:.3f} "
        f"(tolerance {tolerance} s)",
    )
    return f"{path} {field} is within {tolerance} s of {wanted:.3f} ({delta:+.3f} s)"
