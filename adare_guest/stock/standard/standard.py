"""The stock ``standard`` collection: checks on files that most scenarios need.

Run as ``standard.<name>`` (or a bare ``<name>``) without uploading anything, e.g.
``guest.run_test("standard.content_contains", path="/etc/hostname", text="debian")``.
A missing file fails a check on it (FAILED); a check that cannot be made
(wrong parameter, a directory where a file is expected) is an ERROR.

Two families: the native checks (``path`` parameter) and adare's checks under
adare's names and parameters (``dst``, which may be a glob), so adare playbook
steps run unchanged.
"""

from __future__ import annotations

import datetime
import difflib
import hashlib
import os
import re
import stat
import time
from collections.abc import Callable

from adare_guest.iso8601 import fromisoformat
from adare_guest.placeholders import has_placeholders
from adare_guest.stock.support import must_exist, one_path, paths, read_bytes, read_text, snippet
from adare_guest.testfunctions import TestContext, TestError, testfunction

_FILE_TYPES = {"file": stat.S_ISREG, "dir": stat.S_ISDIR, "symlink": stat.S_ISLNK}
_TIMESTAMP_FIELDS = {
    "mtime": "st_mtime",
    "atime": "st_atime",
    "ctime": "st_ctime",
    "birthtime": "st_birthtime",
}


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


@testfunction(
    description="path exists (optionally of type file, dir or symlink); adare: dst names file(s)"
)
def file_exists(
    ctx: TestContext,
    path: str | None = None,
    type: str | None = None,
    dst: str | None = None,
    match_mode: str = "any",
) -> str:
    ctx.error_if(
        (path is None) == (dst is None), "give either path (native) or dst (adare), not both"
    )
    if dst is not None:
        return _kind_exists(ctx, dst, match_mode, "file", os.path.isfile)
    assert path is not None
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
    if has_placeholders(expected):
        outcome = ctx.matches(content, expected)
        ctx.fail_if(not outcome.ok, f"{path}: {outcome.message}")
        return f"{path} matches the template: {outcome.message}"
    ctx.fail_if(
        content != expected, f"{path} holds {snippet(content)}, expected {snippet(expected)}"
    )
    return f"{path} holds the expected {len(expected)} characters"


@testfunction(description="the file's text contains `text`")
def content_contains(ctx: TestContext, path: str, text: str, encoding: str = "utf-8") -> str:
    content = _read_text(ctx, path, encoding)
    ctx.fail_if(
        text not in content,
        f"{path} does not contain {snippet(text)}; it holds {snippet(content)}",
    )
    return f"{path} contains {snippet(text)}"


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
    ctx.fail_if(match is None, f"{path} has no match for /{pattern}/; it holds {snippet(content)}")
    assert match is not None
    return f"{path} matches /{pattern}/ at offset {match.start()}: {snippet(match.group(0))}"


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
            # Deferred: grp and pwd do not exist on Windows, where the collection must load.
            import grp

            # Deferred with grp: POSIX only.
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
        parsed = fromisoformat(value.strip().replace("Z", "+00:00"))
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


# --- adare's checks, under adare's names and parameters ---------------------------------


def _kind_exists(
    ctx: TestContext, dst: str, match_mode: str, kind: str, test: Callable[[str], bool]
) -> str:
    found = paths(ctx, dst, match_mode)
    hits = [p for p in found if test(p)]
    if match_mode == "single":
        ctx.fail_if(os.path.exists(found[0]) and not hits, f"{found[0]} exists but is not a {kind}")
        ctx.fail_if(not hits, f"{kind} {dst} does not exist")
        return f"{kind} {hits[0]} exists"
    ctx.fail_if(not hits and bool(found), f"{len(found)} path(s) match {dst} but none is a {kind}")
    ctx.fail_if(not hits, f"no {kind} matches {dst}")
    return f"{len(hits)} {kind}(s) found: {', '.join(hits)}"


def _kind_absent(
    ctx: TestContext, dst: str, match_mode: str, kind: str, test: Callable[[str], bool]
) -> str:
    hits = [p for p in paths(ctx, dst, "any") if test(p)]
    ctx.fail_if(bool(hits), f"{len(hits)} {kind}(s) exist: {', '.join(hits[:10])}")
    return f"no {kind} matches {dst}"


@testfunction(description="no file matches dst (a path or glob)")
def file_does_not_exist(ctx: TestContext, dst: str = "", match_mode: str = "any") -> str:
    return _kind_absent(ctx, dst, match_mode, "file", os.path.isfile)


@testfunction(description="directory(ies) matching dst exist")
def dir_exists(ctx: TestContext, dst: str = "", match_mode: str = "any") -> str:
    return _kind_exists(ctx, dst, match_mode, "directory", os.path.isdir)


@testfunction(description="no directory matches dst")
def dir_does_not_exist(ctx: TestContext, dst: str = "", match_mode: str = "any") -> str:
    return _kind_absent(ctx, dst, match_mode, "directory", os.path.isdir)


@testfunction(description="the directory holds every name in files (others are listed)")
def dir_content(ctx: TestContext, dst: str = "", files: list[str] | None = None) -> list[str]:
    directory = one_path(ctx, dst)
    must_exist(ctx, directory, "directory")
    ctx.error_if(not os.path.isdir(directory), f"{directory} is not a directory")
    present = sorted(os.listdir(directory))
    wanted = list(files or [])
    missing = [name for name in wanted if name not in present]
    extra = [name for name in present if name not in wanted]
    ctx.fail_if(
        bool(missing),
        f"missing in {directory}: {missing}" + (f"; also there: {extra}" * bool(extra)),
    )
    return [f"{directory} holds all {len(wanted)} expected entries"] + (
        [f"additional entries: {extra}"] if extra else []
    )


@testfunction(description="the file's text matches the regex (re.search)")
def file_content_matches_regex(
    ctx: TestContext,
    dst: str = "",
    regex: str = "",
    encoding: str = "utf-8",
    strip_bom: bool = False,
) -> str:
    try:
        pattern = re.compile(regex)
    except re.error as exc:
        raise TestError(f"bad regular expression {regex!r}: {exc}") from None
    path = one_path(ctx, dst)
    text = read_text(ctx, path, encoding, strip_bom)
    found = pattern.search(text)
    ctx.fail_if(
        found is None, f"{path}: content does not match /{regex}/; it holds {snippet(text)}"
    )
    assert found is not None
    return f"{path} matches /{regex}/: {snippet(found.group(0))}"


@testfunction(
    description="the file's text (stripped) equals content, placeholders compared by metadata"
)
def file_content_equals(
    ctx: TestContext,
    dst: str = "",
    content: str = "",
    encoding: str = "utf-8",
    strip_bom: bool = False,
) -> list[str]:
    path = one_path(ctx, dst)
    text = read_text(ctx, path, encoding, strip_bom).strip()
    if has_placeholders(content):
        outcome = ctx.matches(text, content.strip())
        ctx.fail_if(not outcome.ok, f"{path}: {outcome.message}")
        return [f"{path} matches the template", outcome.message]
    if text != content.strip():
        diff = difflib.unified_diff(
            content.strip().splitlines(), text.splitlines(), "expected", "actual", lineterm=""
        )
        ctx.fail("\n".join([f"{path} differs from the expected content", *diff]))
    return [f"{path} holds the expected content"]


@testfunction(description="the file contains content (text, or bytes with \\x escapes)")
def file_content_contains(
    ctx: TestContext,
    dst: str = "",
    content: str = "",
    content_type: str = "string",
    encoding: str = "utf-8",
    strip_bom: bool = False,
) -> str:
    ctx.error_if(
        content_type not in ("string", "bytes"),
        f"content_type must be string or bytes, got {content_type!r}",
    )
    path = one_path(ctx, dst)
    if content_type == "bytes":
        try:
            # adare's reading: the text's UTF-8 bytes with their \x, \n, ... escapes
            # decoded, so a character the YAML already decoded (\x89 in a double-quoted
            # string is U+0089) is the UTF-8 a shell's printf of it writes (C2 89).
            needle = content.encode("utf-8").decode("unicode_escape").encode("latin-1")
        except (UnicodeError, ValueError):
            needle = content.encode("utf-8")
        ctx.fail_if(
            needle not in read_bytes(ctx, path), f"{path}: byte pattern {needle!r} not found"
        )
        return f"{path} contains the byte pattern {needle!r}"
    text = read_text(ctx, path, encoding, strip_bom)
    ctx.fail_if(content not in text, f"{path}: {snippet(content)} not found")
    return f"{path} contains {snippet(content)}"


_HASHES = ("md5", "sha1", "sha256", "sha512")


@testfunction(description="the file's md5/sha1/sha256/sha512 equals expected_hash")
def file_hash_matches(
    ctx: TestContext, dst: str = "", expected_hash: str = "", hash_type: str = "sha256"
) -> str:
    kind = hash_type.lower()
    ctx.error_if(kind not in _HASHES, f"hash_type must be one of {_HASHES}, got {hash_type!r}")
    path = one_path(ctx, dst)
    actual = hashlib.new(kind, read_bytes(ctx, path)).hexdigest()
    wanted = expected_hash.strip().lower()
    ctx.fail_if(actual != wanted, f"{path}: {kind} is {actual}, expected {wanted}")
    return f"{path}: {kind} matches {actual}"


_ADARE_TIME_FORMATS = (
    "%Y-%m-%d %H:%M:%S",
    "%Y-%m-%dT%H:%M:%S",
    "%Y-%m-%dT%H:%M:%SZ",
    "%Y-%m-%d",
    "%m/%d/%Y %H:%M:%S",
    "%m/%d/%Y",
)
_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def _adare_time(value: str | int | float | None, time_format: str | None, what: str) -> float:
    """Epoch seconds, or a text in time_format / a common format read as guest local time."""
    if value is None:
        raise TestError(f"{what} is required for this comparison_type")
    if isinstance(value, (int, float)):
        return float(value)
    try:
        return float(value)
    except ValueError:
        pass
    for fmt in (time_format, *_ADARE_TIME_FORMATS):
        if fmt:
            try:
                return datetime.datetime.strptime(value, fmt).timestamp()
            except ValueError:
                continue
    raise TestError(f"cannot read {what} {value!r} as a time")


def _show(epoch: float) -> str:
    return datetime.datetime.fromtimestamp(epoch).isoformat(sep=" ")


@testfunction(
    description="a timestamp (modified, accessed, created) equals/before/after/between/within_last"
)
def file_timestamps(
    ctx: TestContext,
    dst: str = "",
    timestamp_type: str = "modified",
    comparison_type: str = "equals",
    expected_time: str | int | float | None = None,
    time_format: str | None = None,
    tolerance_seconds: int | float | None = None,
    start_time: str | int | float | None = None,
    end_time: str | int | float | None = None,
    within_duration: str | None = None,
) -> str:
    fields = {"modified": "st_mtime", "accessed": "st_atime", "created": "st_birthtime"}
    ctx.error_if(timestamp_type not in fields, f"timestamp_type must be one of {sorted(fields)}")
    path = one_path(ctx, dst)
    must_exist(ctx, path)
    st = os.stat(path)
    # Linux has no birth time in os.stat: adare falls back to ctime, so do we.
    actual = float(getattr(st, fields[timestamp_type], st.st_ctime))
    label = f"{path} {timestamp_type} {_show(actual)}"
    if comparison_type in ("equals", "before", "after"):
        wanted = _adare_time(expected_time, time_format, "expected_time")
        if comparison_type == "equals":
            tolerance = float(tolerance_seconds or 0)
            ctx.fail_if(
                abs(actual - wanted) > tolerance,
                f"{label} is not {_show(wanted)} "
                f"(±{tolerance:g} s; off by {actual - wanted:+.3f} s)",
            )
            return f"{label} matches {_show(wanted)} (±{tolerance:g} s)"
        before = comparison_type == "before"
        ctx.fail_if(
            (actual >= wanted) if before else (actual <= wanted),
            f"{label} is not {comparison_type} {_show(wanted)}",
        )
        return f"{label} is {comparison_type} {_show(wanted)}"
    if comparison_type == "between":
        low = _adare_time(start_time, time_format, "start_time")
        high = _adare_time(end_time, time_format, "end_time")
        ctx.fail_if(
            not low <= actual <= high, f"{label} is not between {_show(low)} and {_show(high)}"
        )
        return f"{label} is between {_show(low)} and {_show(high)}"
    if comparison_type == "within_last":
        text = (within_duration or "").strip()
        ctx.error_if(
            re.fullmatch(r"\d+[smhd]", text) is None,
            f"within_duration must look like 30s, 5m, 2h or 1d, got {within_duration!r}",
        )
        seconds = int(text[:-1]) * _DURATION_UNITS[text[-1]]
        ctx.fail_if(actual < time.time() - seconds, f"{label} is not within the last {text}")
        return f"{label} is within the last {text}"
    raise TestError(
        f"comparison_type must be equals, before, after, between or within_last, "
        f"got {comparison_type!r}"
    )


def _permission_bits(ctx: TestContext, text: str) -> int:
    text = text.strip()
    if re.fullmatch(r"0?o?[0-7]{3,4}", text):
        return int(text.replace("o", ""), 8)
    if re.fullmatch(r"[r-][w-][xsS-][r-][w-][xsS-][r-][w-][xtT-]", text):
        bits = 0
        for i, char in enumerate(text):
            if char != "-" and char not in "ST":
                bits |= 1 << (8 - i)
        return bits
    raise TestError(f"expected_permissions must be octal (644) or rwxr-xr-x, got {text!r}")


@testfunction(description="permission bits (and optionally owner and group) match")
def file_permissions(
    ctx: TestContext,
    dst: str = "",
    expected_permissions: str = "",
    check_owner: str | None = None,
    check_group: str | None = None,
) -> list[str]:
    wanted = _permission_bits(ctx, expected_permissions)
    path = one_path(ctx, dst)
    ctx.fail_if(not os.path.exists(path), f"{path} does not exist")
    st = os.stat(path)
    lines, ok = [], True
    actual = st.st_mode & 0o777
    if wanted > 0o777:  # four digits: compare setuid/setgid/sticky too
        actual = stat.S_IMODE(st.st_mode)
    same = actual == wanted
    ok &= same
    lines.append(
        f"permissions {'match' if same else 'differ'}: {actual:03o}, expected {wanted:03o}"
    )
    for wanted_name, actual_name, what in (
        (check_owner, _owner_names(st)[0] if check_owner else "", "owner"),
        (check_group, _owner_names(st)[1] if check_group else "", "group"),
    ):
        if wanted_name is not None:
            ok &= wanted_name == actual_name
            verb = "matches" if wanted_name == actual_name else "differs"
            lines.append(f"{what} {verb}: {actual_name}, expected {wanted_name}")
    ctx.fail_if(not ok, f"{path}: " + "; ".join(lines))
    return [f"{path}: {line}" for line in lines]


def _owner_names(st: os.stat_result) -> tuple[str, str]:
    """User and group names of a stat result (the number when the name is unknown)."""
    try:
        # Deferred: grp and pwd do not exist on Windows, where the collection must load.
        import grp

        # Deferred with grp: POSIX only.
        import pwd
    except ImportError:  # Windows: no owner names
        raise TestError("owner and group names need pwd/grp (not on this OS)") from None
    try:
        user = pwd.getpwuid(st.st_uid).pw_name
    except KeyError:
        user = str(st.st_uid)
    try:
        group = grp.getgrgid(st.st_gid).gr_name
    except KeyError:
        group = str(st.st_gid)
    return user, group
