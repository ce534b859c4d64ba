"""adare compatibility through the real agent: adare-style collections, raw adare
``run_test`` frames, placeholders with variable metadata, and every stock collection.

The ``client`` fixture (tests/agent/conftest.py) is strict about envelopes.
"""

from __future__ import annotations

import base64
import io
import os
import signal
import subprocess
import sys
import textwrap
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import pytest_asyncio
from stock_scenario import MAKE_FILES, cases

import adare_guest
from adare_guest.placeholders import PlaceholderError, Placeholders

if TYPE_CHECKING:
    from conftest import StrictClient

ADARE_COLLECTION = """
from pathlib import Path

from adarelib.constants import StatusEnum
from adarelib.event.event import TestResult
from adarelib.testset.api import TestContext, testfunction
from adarelib.testset.basictest import HostModeCategory


@testfunction("file_is_gone", "file must not exist", category=HostModeCategory.FILE_BASED)
def file_is_gone(ctx: TestContext, dst: str):
    path, status = ctx.resolve_globfilepath(dst)
    if status:
        return TestResult.error([status])
    if Path(path).exists():
        return TestResult.failed([f"{path} still exists"])
    return TestResult.success([f"{path} is gone"])


@testfunction("line_has", "a line matches a template with placeholders")
def line_has(ctx, dst: str, template: str):
    text = Path(dst).read_text().strip()
    ok, message = ctx.handle_placeholders_comparison(text, template)
    ctx.fail_if(not ok, message)
    return [message]


@testfunction("status_number", "returns a raw StatusEnum verdict")
def status_number(ctx, warn: bool = False):
    return TestResult(StatusEnum.WARNING if warn else StatusEnum.SUCCESS, ["raw"])


@testfunction("crashes", "raises")
def crashes(ctx):
    raise ValueError("bad thing")


@testfunction("screen_shows", "host-side visual check", execute_on_host=True)
def screen_shows(ctx, text: str):
    return "never runs in the guest"
"""

NATIVE_POSITIONAL = """
from adare_guest.testfunctions import testfunction

@testfunction("renamed", "positional name and description")
def original(ctx, value: int):
    return value * 2
"""


def zip_of(files: dict[str, str]) -> str:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, content in files.items():
            archive.writestr(name, content)
    return base64.b64encode(buffer.getvalue()).decode()


async def adare_frame(client: StrictClient, step: str, **test: Any) -> dict[str, Any]:
    """A ``run_test`` call exactly as adare's host sends it."""
    data = {
        "name": step,
        "description": "",
        "parameter": {},
        "expect_to_fail": False,
        "timeout": 120.0,
    }
    data.update(test)
    return await client.ok("run_test", test_name=step, resolved_test_data=data)


@pytest_asyncio.fixture
async def adare_uploaded(client: StrictClient) -> StrictClient:
    answer = await client.ok(
        "upload_testfunctions",
        testfunctions_data=zip_of(
            {
                "adare_checks/adare_checks.py": ADARE_COLLECTION,
                "native/native.py": NATIVE_POSITIONAL,
            }
        ),
    )
    assert answer["status"] == "success", answer
    return client


@pytest.mark.asyncio
async def test_adare_collection_runs_unchanged_from_a_raw_adare_frame(
    adare_uploaded: StrictClient, tmp_path: Path
) -> None:
    gone = await adare_frame(
        adare_uploaded,
        "check_gone",
        function="adare_checks.file_is_gone",
        parameter={"dst": str(tmp_path / "deleted.txt")},
    )
    assert gone["result"] == {
        "status": "SUCCESS",
        "details": [f"{tmp_path / 'deleted.txt'} is gone"],
    }
    (tmp_path / "kept.txt").write_text("x")
    kept = await adare_frame(
        adare_uploaded,
        "check_kept",
        function="adare_checks.file_is_gone",
        parameter={"dst": str(tmp_path / "kept*.txt")},
    )
    assert kept["result"]["status"] == "FAILED"
    assert kept["message"] == "check_kept: FAILED"


@pytest.mark.asyncio
async def test_expect_to_fail_swaps_only_success_and_failed(
    adare_uploaded: StrictClient, tmp_path: Path
) -> None:
    (tmp_path / "kept.txt").write_text("x")
    swapped = await adare_frame(
        adare_uploaded,
        "should_fail",
        function="adare_checks.file_is_gone",
        parameter={"dst": str(tmp_path / "kept.txt")},
        expect_to_fail=True,
    )
    assert swapped["result"]["status"] == "SUCCESS"
    assert swapped["result"]["details"][-1] == "Expected to fail and did fail"
    assert swapped["observed_status"] == "FAILED"
    unexpected = await adare_frame(
        adare_uploaded,
        "should_fail_2",
        function="adare_checks.file_is_gone",
        parameter={"dst": str(tmp_path / "nothing.txt")},
        expect_to_fail=True,
    )
    assert unexpected["result"]["status"] == "FAILED"
    assert unexpected["result"]["details"][-1] == "Expected to fail but succeeded"
    crashed = await adare_frame(
        adare_uploaded, "crash", function="adare_checks.crashes", expect_to_fail=True
    )
    assert crashed["result"]["status"] == "ERROR"
    assert "ValueError: bad thing" in crashed["result"]["details"][0]


@pytest.mark.asyncio
async def test_bare_function_name_means_the_standard_collection(
    client: StrictClient, tmp_path: Path
) -> None:
    (tmp_path / "hosts").write_text("127.0.0.1 localhost\n")
    adare = await adare_frame(
        client,
        "check_hosts",
        function="file_content_contains",
        parameter={"dst": str(tmp_path / "hosts"), "content": "localhost"},
    )
    assert adare["result"]["status"] == "SUCCESS"
    ours = await client.ok(
        "run_test", test_name="dir_exists", resolved_test_data={"dst": str(tmp_path)}
    )
    assert ours["result"]["status"] == "SUCCESS"


@pytest.mark.asyncio
async def test_placeholders_with_adare_variable_metadata(
    adare_uploaded: StrictClient, tmp_path: Path
) -> None:
    note = tmp_path / "info"
    note.write_text("DeletionDate=2024-05-01T12:00:04 by user42\n")
    metadata = {
        "deleted_at_resolved": {
            "type": "timestamp",
            "raw_value": "1714564800",
            "resolved_value": "1714564800",
            "tolerance": [-5, 0],
            "timezone": "utc",
        },
        "who_resolved": {"type": "regex", "raw_value": r"user\d+", "resolved_value": r"user\d+"},
    }
    template = "DeletionDate={{ deleted_at_resolved }} by {{ who_resolved }}"
    inside = await adare_frame(
        adare_uploaded,
        "recycle",
        function="adare_checks.line_has",
        parameter={"dst": str(note), "template": template},
        _VARIABLE_METADATA=metadata,
    )
    assert inside["result"]["status"] == "SUCCESS", inside
    late = {
        **metadata,
        "deleted_at_resolved": {**metadata["deleted_at_resolved"], "tolerance": [0, 3]},
    }
    outside = await adare_frame(
        adare_uploaded,
        "recycle",
        function="adare_checks.line_has",
        parameter={"dst": str(note), "template": template},
        _VARIABLE_METADATA=late,
    )
    assert outside["result"]["status"] == "FAILED"
    assert "outside tolerance" in outside["result"]["details"][0]


@pytest.mark.asyncio
async def test_our_api_takes_variables_per_call_or_from_set_variables(
    client: StrictClient, tmp_path: Path
) -> None:
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "alice.txt").write_text("owner=alice\n")
    await client.ok("set_variables", variables='{"user": "alice"}')
    from_agent = await client.ok(
        "run_test",
        test_name="standard.file_content_equals",
        resolved_test_data={
            "dst": str(tmp_path / "home" / "{{ user }}.txt"),
            "content": "owner={{ user }}",
        },
    )
    assert from_agent["result"]["status"] == "SUCCESS", from_agent
    per_call = await client.ok(
        "run_test",
        test_name="standard.file_content_equals",
        resolved_test_data={
            "dst": str(tmp_path / "home" / "alice.txt"),
            "content": "owner={{ who }}",
            "variables": {"who": {"value": "^al", "type": "regex"}},
        },
    )
    assert per_call["result"]["status"] == "SUCCESS", per_call
    unknown = await client.ok(
        "run_test",
        test_name="standard.content_equals",
        resolved_test_data={
            "path": str(tmp_path / "home" / "alice.txt"),
            "expected": "{{ nobody }}",
        },
    )
    assert unknown["result"]["status"] == "ERROR"
    assert "nobody" in unknown["result"]["details"][0]


@pytest.mark.asyncio
async def test_adare_results_host_side_functions_and_positional_decorator(
    adare_uploaded: StrictClient,
) -> None:
    warned = await adare_frame(
        adare_uploaded, "s", function="adare_checks.status_number", parameter={"warn": True}
    )
    assert warned["result"] == {"status": "WARNING", "details": ["raw"]}
    host = await adare_frame(
        adare_uploaded, "visual", function="adare_checks.screen_shows", parameter={"text": "x"}
    )
    assert host["result"]["status"] == "ERROR"
    assert "execute_on_host=True" in host["result"]["details"][0]
    assert "not supported" in host["result"]["details"][0]
    renamed = await adare_uploaded.ok(
        "run_test", test_name="native.renamed", resolved_test_data={"value": 21}
    )
    assert renamed["result"] == {"status": "SUCCESS", "details": ["42"]}


@pytest.mark.asyncio
async def test_malformed_adare_frames_get_a_reason(client: StrictClient) -> None:
    bad = await adare_frame(client, "x", function="file_exists", expect_to_fail="yes")
    assert bad["status"] == "error" and "expect_to_fail" in bad["message"]
    wrong_params = await adare_frame(
        client, "y", function="file_hash_matches", parameter={"dst": "/etc/hostname", "nope": 1}
    )
    assert wrong_params["result"]["status"] == "ERROR"
    assert "nope" in wrong_params["result"]["details"][0]


def test_placeholder_metadata_rules() -> None:
    stamps = Placeholders(
        metadata={
            "t": {
                "type": "timestamp",
                "resolved_value": "2024-05-01 12:00:00",
                "tolerance": 2,
                "format": "%d.%m.%Y %H:%M:%S",
                "timezone": "+02:00",
            },
        }
    )
    assert stamps.compare("t", "01.05.2024 10:00:01").ok  # 12:00+02:00 == 10:00 UTC
    assert not stamps.compare("t", "01.05.2024 12:00:01").ok
    exact = Placeholders({"t": {"value": "2024", "type": "timestamp"}})
    assert exact.compare("t", "2024").ok and not exact.compare("t", "2024.0").ok
    with pytest.raises(PlaceholderError, match="no text between"):
        Placeholders({"a": "1", "b": "2"}).match_template("12", "{{ a }}{{ b }}")
    with pytest.raises(PlaceholderError, match="tolerance must be"):
        Placeholders({"t": {"value": 0, "type": "timestamp", "tolerance": "5s"}}).compare("t", "0")


@pytest.fixture
def stock_files(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    root = tmp_path / "evidence"
    made = subprocess.run(
        [sys.executable, "-", str(root)],
        input=MAKE_FILES,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    pid = int(made.stdout.strip())
    try:
        deadline = time.monotonic() + 20
        while not (root / "port").is_file() or not (root / "port").read_text():
            assert time.monotonic() < deadline, "the listener did not start"
            time.sleep(0.05)
        yield root, int((root / "port").read_text())
    finally:
        os.kill(pid, signal.SIGKILL)


@pytest.mark.asyncio
async def test_stock_collections_give_the_expected_verdicts(
    client: StrictClient, stock_files: tuple[Path, int]
) -> None:
    root, port = stock_files
    wrong = []
    for name, params, expected in cases(str(root), port):
        answer = await client.ok("run_test", test_name=name, resolved_test_data=params)
        if answer["result"]["status"] != expected:
            wrong.append((name, params, expected, answer["result"]))
    assert not wrong, "\n".join(map(str, wrong))


def test_every_stock_collection_and_adarelib_load_from_a_zip_bundle(tmp_path: Path) -> None:
    package = Path(adare_guest.__file__).parent
    bundle = tmp_path / "agent.pyz"
    with zipfile.ZipFile(bundle, "w") as archive:
        for path in sorted(package.rglob("*.py")):
            archive.write(path, f"adare_guest/{path.relative_to(package).as_posix()}")
    probe = textwrap.dedent(
        """
        import sys, adare_guest
        from adare_guest.testfunctions.library import STOCK_COLLECTIONS, TestFunctionLibrary
        assert adare_guest.__file__.startswith(sys.argv[1]), adare_guest.__file__
        library = TestFunctionLibrary(None)
        for name in STOCK_COLLECTIONS:
            collection = library.collection(name)
            assert collection.load_error is None, collection.load_error
            print(collection.origin, len(collection.functions))
        import adarelib.testset.api
        print(adarelib.testset.api.__name__)
        """
    )
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
    lines = done.stdout.splitlines()
    assert lines[0].startswith("adare_guest/stock/standard/standard.py ")
    assert len(lines) == 9 and lines[-1] == "adare_guest.adarelib_compat.testset.api"
