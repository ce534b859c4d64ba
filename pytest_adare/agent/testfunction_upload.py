"""Guest test functions from the host: zip collections for upload, judge outcomes.

::

    guest.upload_testfunctions("tests/guest_checks")    # zip_collection() underneath
    outcome = guest.run_test("checks.report_written", path="/tmp/r.pdf")
    assert_outcome(outcome, "checks.report_written")    # FAILED/ERROR -> pytest failure

``zip_collection(directory)`` accepts one collection (``D`` holding ``D/D.py``)
or a directory of collections (``X/D1/D1.py``, ``X/D2/D2.py``). The zip is
deterministic (sorted names, fixed dates and permissions: the same sources
give the same bytes), is checked on the host with the agent's own archive
rules, and must fit the 16 MiB host→guest message as base64.
"""

from __future__ import annotations

import io
import os
import warnings
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import pytest

from adare_guest.archive import MAX_MEMBERS, UnsafeArchive, check_archive
from adare_guest.protocol import MAX_HOST_MESSAGE
from pytest_adare.errors import AdareError

__all__ = [
    "MAX_ZIP_BYTES",
    "GuestTestWarning",
    "InvalidCollection",
    "TestFunctionsTooLarge",
    "assert_outcome",
    "find_collections",
    "zip_collection",
]

ENVELOPE_RESERVE = 4096
"""Bytes kept for the JSON envelope around the base64 archive."""
MAX_ZIP_BYTES = (MAX_HOST_MESSAGE - ENVELOPE_RESERVE) // 4 * 3
"""Largest zip whose base64 still fits one host→guest message."""
_FIXED_DATE = (1980, 1, 1, 0, 0, 0)
_SKIPPED_DIRS = {"__pycache__", ".git", ".hg", ".svn", ".mypy_cache", ".pytest_cache"}
_SKIPPED_SUFFIXES = (".pyc", ".pyo")


class InvalidCollection(AdareError):
    """The directory is not a collection (``D/D.py``) or a directory of collections."""


class TestFunctionsTooLarge(AdareError):
    """The zipped collections do not fit one 16 MiB host→guest message."""

    __test__ = False


class GuestTestWarning(UserWarning):
    """A guest test function ended with WARNING."""


class Outcome(Protocol):
    """What :func:`assert_outcome` needs (``pytest_adare.guest.TestOutcome`` has it)."""

    @property
    def status(self) -> str: ...

    @property
    def details(self) -> Sequence[str]: ...


def _is_collection(path: Path) -> bool:
    return path.is_dir() and (path / f"{path.name}.py").is_file()


def find_collections(directory: Path) -> list[Path]:
    """The collection directories: ``directory`` itself, or its collection subdirectories.

    :raise InvalidCollection: none found, or a collection name is not an identifier.
    """
    if not directory.is_dir():
        raise InvalidCollection(f"{directory} is not a directory")
    if _is_collection(directory):
        found = [directory]
    else:
        found = sorted(p for p in directory.iterdir() if _is_collection(p))
    if not found:
        raise InvalidCollection(
            f"{directory} holds no test-function collection: expected {directory.name}/"
            f"{directory.name}.py, or subdirectories D with D/D.py"
        )
    for collection in found:
        if not collection.name.isidentifier():
            raise InvalidCollection(
                f"collection name {collection.name!r} is not a Python identifier "
                "(tests are called as 'collection.name')"
            )
    return found


def _collection_files(collection: Path) -> list[tuple[str, Path]]:
    """(archive name, host file) for every file of one collection, sorted."""
    files: list[tuple[str, Path]] = []
    for top, dirs, names in os.walk(collection):
        here = Path(top)
        for name in dirs:
            if (here / name).is_symlink() and name not in _SKIPPED_DIRS:
                raise InvalidCollection(
                    f"{here / name} is a symlinked directory; copy it into the collection"
                )
        dirs[:] = [d for d in dirs if d not in _SKIPPED_DIRS]
        for name in names:
            if name.endswith(_SKIPPED_SUFFIXES):
                continue
            relative = (here / name).relative_to(collection.parent).as_posix()
            if "\\" in relative:
                raise InvalidCollection(f"{here / name}: backslashes in names are refused")
            files.append((relative, here / name))
    return sorted(files)


def _check_syntax(collection: Path) -> None:
    module = collection / f"{collection.name}.py"
    try:
        compile(module.read_bytes(), str(module), "exec")
    except SyntaxError as exc:
        raise InvalidCollection(f"{module}:{exc.lineno}: syntax error: {exc.msg}") from None


def zip_collection(directory: Path) -> bytes:
    """A deterministic zip of the collection(s) in ``directory``, ready for upload.

    :raise InvalidCollection: no collection, a bad name, a syntax error in ``D/D.py``,
        a symlinked directory, or an archive the agent would refuse.
    :raise TestFunctionsTooLarge: the zip does not fit one host→guest message.
    """
    collections = find_collections(Path(directory))
    for collection in collections:
        _check_syntax(collection)
    files = [item for collection in collections for item in _collection_files(collection)]
    if len(files) > MAX_MEMBERS:
        raise InvalidCollection(f"{len(files)} files, the agent accepts {MAX_MEMBERS}")
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        for name, path in files:
            info = zipfile.ZipInfo(name, date_time=_FIXED_DATE)
            info.external_attr = 0o100644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, path.read_bytes())
    data = buffer.getvalue()
    if len(data) > MAX_ZIP_BYTES:
        largest = sorted(files, key=lambda item: item[1].stat().st_size, reverse=True)[:3]
        listing = ", ".join(f"{name} ({path.stat().st_size} B)" for name, path in largest)
        raise TestFunctionsTooLarge(
            f"the zipped collections are {len(data)} bytes; one upload holds at most "
            f"{MAX_ZIP_BYTES} (16 MiB as base64). Largest files: {listing}. "
            "Move data files into the guest with guest.push() instead."
        )
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            check_archive(archive)
    except UnsafeArchive as exc:
        raise InvalidCollection(f"the agent would refuse this archive: {exc}") from None
    return data


def assert_outcome(outcome: Outcome, name: str = "guest test function") -> None:
    """Fail the running pytest test unless ``outcome`` is SUCCESS or WARNING.

    FAILED, ERROR and UNKNOWN become ``pytest.fail`` with every detail line;
    WARNING passes but emits a :class:`GuestTestWarning` (shown in the summary).
    """
    details = "\n".join(f"  {line}" for line in outcome.details) or "  (no details)"
    if outcome.status == "SUCCESS":
        return
    if outcome.status == "WARNING":
        warnings.warn(GuestTestWarning(f"{name} ended with WARNING:\n{details}"), stacklevel=2)
        return
    pytest.fail(f"{name} {outcome.status}:\n{details}", pytrace=False)
