"""The test-function library on its own: decorator, verdicts, loading, timeouts, stock checks."""

from __future__ import annotations

import asyncio
import hashlib
import os
import subprocess
import sys
import textwrap
import time
import zipfile
from pathlib import Path

import pytest

import adare_guest
from adare_guest.testfunctions import (
    TestStatus,
    arun_test_function,
    run_test_function,
)
from adare_guest.testfunctions.library import (
    TestFunctionLibrary,
    UnknownTestFunction,
    load_collection,
)

CHECKS = """
import asyncio
import time
from adare_guest.testfunctions import testfunction

@testfunction(description="always fine")
def fine(ctx):
    return "all good"

@testfunction(name="renamed")
def original_name(ctx, value: int = 1):
    return [f"value={value}", value * 2]

@testfunction
def fails(ctx, limit: int):
    ctx.fail_if(limit > 3, f"limit {limit} is above 3")
    return None

@testfunction()
def errors(ctx):
    ctx.error_if(True, "cannot check: no such device")

@testfunction()
def warns(ctx):
    ctx.warn_if(True, "disk almost full")
    return "checked"

@testfunction()
def crashes(ctx):
    return {}["missing"]

@testfunction()
def asserts(ctx):
    assert 1 + 1 == 3, "arithmetic is broken"

@testfunction()
def reads_variables(ctx, key: str):
    return f"{key}={ctx.variables.get(key)} params={dict(ctx.params)}"

@testfunction()
async def waits_async(ctx, seconds: float):
    await asyncio.sleep(seconds)
    return f"slept {seconds}"

@testfunction(timeout=0.3)
def sleeps_sync(ctx, seconds: float):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not ctx.cancelled.is_set():
        time.sleep(0.01)
    return "woke up"

@testfunction()
def returns_number(ctx):
    return 42

def not_a_test(ctx):
    return "ignored"
"""


def write_collection(root: Path, name: str, source: str) -> Path:
    directory = root / name
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{name}.py").write_text(textwrap.dedent(source))
    return directory


@pytest.fixture
def library(tmp_path: Path) -> TestFunctionLibrary:
    write_collection(tmp_path, "checks", CHECKS)
    return TestFunctionLibrary(tmp_path)


def run(library: TestFunctionLibrary, name: str, **params: object) -> tuple[str, list[str]]:
    _, function = library.resolve(name)
    assert function is not None
    result = run_test_function(function, params, {"colour": "blue"}, name=name)
    return result.status.value, result.details


def test_decorated_functions_are_found_by_collection_dot_name(
    library: TestFunctionLibrary,
) -> None:
    names = set(library.names())
    assert {"checks.fine", "checks.renamed", "checks.fails", "checks.waits_async"} <= names
    assert "checks.not_a_test" not in names
    assert "checks.original_name" not in names
    assert "standard.file_exists" in names


def test_return_value_becomes_success_details(library: TestFunctionLibrary) -> None:
    assert run(library, "checks.fine") == ("SUCCESS", ["all good"])
    assert run(library, "checks.renamed", value=5) == ("SUCCESS", ["value=5", "10"])


def test_fail_if_gives_failed_only_when_the_condition_holds(library: TestFunctionLibrary) -> None:
    assert run(library, "checks.fails", limit=9) == ("FAILED", ["limit 9 is above 3"])
    assert run(library, "checks.fails", limit=2) == ("SUCCESS", [])


def test_error_if_gives_error(library: TestFunctionLibrary) -> None:
    assert run(library, "checks.errors") == ("ERROR", ["cannot check: no such device"])


def test_warn_if_lets_the_test_finish_as_warning(library: TestFunctionLibrary) -> None:
    assert run(library, "checks.warns") == ("WARNING", ["WARNING: disk almost full", "checked"])


def test_unexpected_exception_is_error_with_traceback(library: TestFunctionLibrary) -> None:
    status, details = run(library, "checks.crashes")
    assert status == "ERROR"
    assert details[0] == "KeyError: 'missing'"
    assert "Traceback" in details[1] and "checks.py" in details[1] and "crashes" in details[1]


def test_plain_assert_is_failed(library: TestFunctionLibrary) -> None:
    status, details = run(library, "checks.asserts")
    assert status == "FAILED"
    assert details[0] == "arithmetic is broken"


def test_variables_and_params_reach_the_test(library: TestFunctionLibrary) -> None:
    assert run(library, "checks.reads_variables", key="colour") == (
        "SUCCESS",
        ["colour=blue params={'key': 'colour'}"],
    )


def test_missing_or_unknown_params_are_an_error_naming_them(library: TestFunctionLibrary) -> None:
    status, details = run(library, "checks.fails")
    assert status == "ERROR" and "limit" in details[0]
    status, details = run(library, "checks.fine", bogus=1)
    assert status == "ERROR" and "bogus" in details[0]


def test_unsupported_return_type_is_an_error(library: TestFunctionLibrary) -> None:
    status, details = run(library, "checks.returns_number")
    assert status == "ERROR"
    assert "returned int" in details[0]


def test_async_test_functions_are_awaited(library: TestFunctionLibrary) -> None:
    assert run(library, "checks.waits_async", seconds=0.01) == ("SUCCESS", ["slept 0.01"])


def test_async_test_is_cancelled_at_its_timeout(library: TestFunctionLibrary) -> None:
    _, function = library.resolve("checks.waits_async")
    assert function is not None
    result = run_test_function(function, {"seconds": 30}, timeout=0.2)
    assert result.status is TestStatus.ERROR
    assert "did not finish within 0.2 s" in result.details[0]


def test_sync_test_gets_its_decorator_timeout_and_a_cancel_signal(
    library: TestFunctionLibrary,
) -> None:
    _, function = library.resolve("checks.sleeps_sync")
    assert function is not None
    started = time.monotonic()
    result = run_test_function(function, {"seconds": 60})
    assert result.status is TestStatus.ERROR
    assert "within 0.3 s" in result.details[0]
    assert time.monotonic() - started < 30  # far below the 60 s the test wanted


def test_async_runner_does_not_block_the_event_loop(library: TestFunctionLibrary) -> None:
    _, function = library.resolve("checks.sleeps_sync")
    assert function is not None

    async def scenario() -> tuple[str, int]:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        task = asyncio.create_task(ticker())
        result = await arun_test_function(function, {"seconds": 0.2}, timeout=5)
        task.cancel()
        return result.status.value, ticks

    status, ticks = asyncio.run(scenario())
    assert status == "SUCCESS"
    assert ticks > 3


def test_loading_leaves_sys_modules_and_sys_path_alone(tmp_path: Path) -> None:
    before_modules, before_path = set(sys.modules), list(sys.path)
    first = load_collection(write_collection(tmp_path, "mine", CHECKS))
    second = load_collection(tmp_path / "mine")
    added = set(sys.modules) - before_modules
    # only the adarelib alias (and the compat modules behind it) may appear
    assert all(n.split(".")[0] == "adarelib" or "adarelib_compat" in n for n in added), added
    assert sys.path == before_path
    assert first.functions["fine"].func is not second.functions["fine"].func


def test_broken_collection_reports_error_with_traceback(tmp_path: Path) -> None:
    write_collection(tmp_path, "broken", "def oops(:\n")
    library = TestFunctionLibrary(tmp_path)
    collection, function = library.resolve("broken.anything")
    assert function is None
    assert collection.load_error is not None and "SyntaxError" in collection.load_error


def test_collection_missing_a_dependency_loads_once_it_is_installed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))  # stands in for site-packages that pip writes to
    write_collection(
        tmp_path / "collections",
        "needs",
        """
import adare_late_dependency
from adare_guest.testfunctions import testfunction
@testfunction
def answer(ctx):
    return str(adare_late_dependency.ANSWER)
""",
    )
    library = TestFunctionLibrary(tmp_path / "collections")
    collection, function = library.resolve("needs.answer")
    assert function is None and "No module named 'adare_late_dependency'" in str(
        collection.load_error
    )
    (site / "adare_late_dependency.py").write_text("ANSWER = 42\n")
    try:
        _, function = library.resolve("needs.answer")
        assert function is not None and run_test_function(function).details == ["42"]
    finally:
        sys.modules.pop("adare_late_dependency", None)


def test_unknown_names_say_what_exists(library: TestFunctionLibrary) -> None:
    with pytest.raises(UnknownTestFunction, match=r"available: .*'fine'"):
        library.resolve("checks.nope")
    with pytest.raises(UnknownTestFunction, match=r"no test collection 'nope'.*'checks'"):
        library.resolve("nope.fine")
    with pytest.raises(UnknownTestFunction, match=r"function 'fine' in collection 'standard'"):
        library.resolve("fine")  # a bare name means standard.<name>, as in adare
    with pytest.raises(UnknownTestFunction, match=r"must be 'collection\.name'"):
        library.resolve("checks.")


def test_cache_holds_until_invalidated(tmp_path: Path) -> None:
    write_collection(
        tmp_path,
        "live",
        """
from adare_guest.testfunctions import testfunction
@testfunction
def version(ctx):
    return "v1"
""",
    )
    library = TestFunctionLibrary(tmp_path)
    _, v1 = library.resolve("live.version")
    (tmp_path / "live" / "live.py").write_text(
        (tmp_path / "live" / "live.py").read_text().replace("v1", "v2")
    )
    assert library.resolve("live.version")[1] is v1
    library.invalidate()
    _, v2 = library.resolve("live.version")
    assert v2 is not None and run_test_function(v2).details == ["v2"]


def test_uploaded_collection_named_standard_shadows_the_stock_one(tmp_path: Path) -> None:
    write_collection(
        tmp_path,
        "standard",
        """
from adare_guest.testfunctions import testfunction
@testfunction
def mine(ctx):
    return "uploaded"
""",
    )
    names = TestFunctionLibrary(tmp_path).names()
    assert [n for n in names if n.startswith("standard.")] == ["standard.mine"]


# ----------------------------------------------------------------- stock collection


def stock(name: str, **params: object) -> tuple[str, list[str]]:
    _, function = TestFunctionLibrary(None).resolve(f"standard.{name}")
    assert function is not None
    result = run_test_function(function, params, name=name, timeout=30)
    return result.status.value, result.details


def collection_check(name: str, **params: object) -> tuple[str, list[str]]:
    _, function = TestFunctionLibrary(None).resolve(name)
    assert function is not None
    result = run_test_function(function, params, name=name, timeout=30)
    return result.status.value, result.details


def test_a_missing_database_reads_as_an_empty_one_and_is_not_created(tmp_path: Path) -> None:
    # adare's test_sqlite: sqlite3.connect would create it; the verdicts stay adare's.
    missing = tmp_path / "nonexistent.db"
    query = collection_check("sqlite.query_result", dst=str(missing), query="SELECT 1",
                             expected_rows=1)  # fmt: skip
    assert query[0] == "SUCCESS", query
    assert collection_check("sqlite.table_exists", dst=str(missing), table="t")[0] == "FAILED"
    assert not missing.exists()
    assert collection_check("sqlite.query_result", dst=str(tmp_path), query="SELECT 1")[0] == (
        "ERROR"
    )


def test_the_jsonl_checks_fail_on_an_empty_file(tmp_path: Path) -> None:
    # adare's test_jsonl: line_count of a 0-byte file fails even for expected_count 0.
    empty, blank = tmp_path / "empty.jsonl", tmp_path / "blank.jsonl"
    empty.write_bytes(b"")
    blank.write_text("\n")
    counted = collection_check("jsonl.line_count", dst=str(empty), expected_count=0)
    assert counted[0] == "FAILED" and "empty (0 bytes)" in counted[1][-1], counted
    assert collection_check("jsonl.line_count", dst=str(blank), expected_count=0)[0] == "SUCCESS"


def test_stock_byte_patterns_are_read_as_adare_reads_them(tmp_path: Path) -> None:
    # adare's test_linux_standard: a YAML "\x89PNG\r\n" (U+0089 once parsed) that a
    # shell's printf wrote as UTF-8, and an escaped pattern in a single-quoted string.
    binary = tmp_path / "binary_file.bin"
    text = "Binary data: \x89PNG\r\n\x1a\n"
    binary.write_bytes(text.encode("utf-8") + b"\xff\xfe")
    found = stock("file_content_contains", dst=str(binary), content=text, content_type="bytes")
    assert found[0] == "SUCCESS", found
    escaped = stock("file_content_contains", dst=str(binary), content=r"\xff\xfe",
                    content_type="bytes")  # fmt: skip
    assert escaped[0] == "SUCCESS", escaped
    missing = stock("file_content_contains", dst=str(binary), content=r"\xff\xfe\xfd",
                    content_type="bytes")  # fmt: skip
    assert missing[0] == "FAILED", missing


def test_stock_existence_checks(tmp_path: Path) -> None:
    present = tmp_path / "present.txt"
    present.write_text("x")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    assert stock("file_exists", path=str(present))[0] == "SUCCESS"
    assert stock("file_exists", path=str(present), type="file")[0] == "SUCCESS"
    assert stock("file_exists", path=str(present), type="dir")[0] == "FAILED"
    assert stock("file_exists", path=str(tmp_path / "nope"))[0] == "FAILED"
    assert stock("file_exists", path=str(present), type="pipe")[0] == "ERROR"
    assert stock("file_absent", path=str(tmp_path / "nope"))[0] == "SUCCESS"
    assert stock("file_absent", path=str(tmp_path / "dangling"))[0] == "FAILED"


def test_stock_content_checks(tmp_path: Path) -> None:
    path = tmp_path / "report.txt"
    path.write_text("status: ok\nitems: 17\n")
    p = str(path)
    assert stock("content_equals", path=p, expected="status: ok\nitems: 17\n")[0] == "SUCCESS"
    status, details = stock("content_equals", path=p, expected="status: ok\n")
    assert status == "FAILED" and "'status: ok\\n'" in details[0]
    assert stock("content_contains", path=p, text="items: 17")[0] == "SUCCESS"
    assert stock("content_contains", path=p, text="items: 18")[0] == "FAILED"
    assert stock("content_matches", path=p, pattern=r"^items: \d+$", multiline=True)[0] == (
        "SUCCESS"
    )
    assert stock("content_matches", path=p, pattern=r"^items: \d+$")[0] == "FAILED"
    assert stock("content_matches", path=p, pattern="STATUS", ignore_case=True)[0] == "SUCCESS"
    assert stock("content_matches", path=p, pattern="(")[0] == "ERROR"
    assert stock("content_contains", path=str(tmp_path / "nope"), text="x")[0] == "FAILED"
    assert stock("content_contains", path=str(tmp_path), text="x")[0] == "ERROR"


def test_stock_hash_mode_and_owner_checks(tmp_path: Path) -> None:
    path = tmp_path / "blob"
    path.write_bytes(b"\x00\xff" * 1000)
    path.chmod(0o640)
    p = str(path)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert stock("sha256_equals", path=p, sha256=digest.upper())[0] == "SUCCESS"
    assert stock("sha256_equals", path=p, sha256="0" * 64)[0] == "FAILED"
    assert stock("sha256_equals", path=p, sha256="abc")[0] == "ERROR"
    assert stock("mode_equals", path=p, mode="0640")[0] == "SUCCESS"
    assert stock("mode_equals", path=p, mode=0o640)[0] == "SUCCESS"
    assert stock("mode_equals", path=p, mode="644")[0] == "FAILED"
    assert stock("mode_equals", path=p, mode="rw-r")[0] == "ERROR"
    assert stock("owner_equals", path=p, uid=os.getuid(), gid=os.getgid())[0] == "SUCCESS"
    assert stock("owner_equals", path=p, uid=os.getuid() + 1)[0] == "FAILED"
    assert stock("owner_equals", path=p, user="no-such-user-adare")[0] == "ERROR"
    assert stock("owner_equals", path=p)[0] == "ERROR"


def test_stock_timestamp_within_tolerance(tmp_path: Path) -> None:
    path = tmp_path / "stamped"
    path.write_text("t")
    os.utime(path, (1_700_000_000, 1_700_000_000))
    p = str(path)
    assert stock("timestamp_within", path=p, expected=1_700_000_001.5)[0] == "SUCCESS"
    assert stock("timestamp_within", path=p, expected=1_700_000_010)[0] == "FAILED"
    assert stock("timestamp_within", path=p, expected="2023-11-14T22:13:20Z")[0] == "SUCCESS"
    assert (
        stock("timestamp_within", path=p, expected=1_700_000_000, field="atime", tolerance=0)[0]
        == "SUCCESS"
    )
    assert stock("timestamp_within", path=p, expected="yesterday")[0] == "ERROR"
    assert stock("timestamp_within", path=p, expected=0, field="size")[0] == "ERROR"


def test_stock_collection_loads_from_inside_a_zip_bundle(tmp_path: Path) -> None:
    """In the guest the agent runs from a zipapp: the stock collection must load from it."""
    package = Path(adare_guest.__file__).parent
    bundle = tmp_path / "agent.pyz"
    with zipfile.ZipFile(bundle, "w") as archive:
        for path in sorted(package.rglob("*.py")):
            archive.write(path, f"adare_guest/{path.relative_to(package).as_posix()}")
    probe = textwrap.dedent(
        """
        import os, sys, adare_guest
        from adare_guest.testfunctions.library import TestFunctionLibrary
        from adare_guest.testfunctions import run_test_function
        assert adare_guest.__file__.startswith(sys.argv[1]), adare_guest.__file__
        collection, function = TestFunctionLibrary(None).resolve("standard.file_exists")
        result = run_test_function(function, {"path": sys.argv[1]})
        print(collection.origin, result.status.value)
        """
    )
    # -S: no site-packages, so the editable install cannot shadow the zip.
    done = subprocess.run(
        [sys.executable, "-S", "-c", probe, str(bundle)],
        env={**os.environ, "PYTHONPATH": str(bundle)},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["adare_guest/stock/standard/standard.py", "SUCCESS"]
