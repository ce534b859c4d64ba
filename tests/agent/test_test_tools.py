"""Test tools through the real agent server (all four groups) over a real WebSocket.

The ``client`` fixture (tests/agent/conftest.py) is strict: any envelope the
reference host client would reject fails the test.
"""

from __future__ import annotations

import base64
import io
import json
import stat
import textwrap
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from adare_guest import archive

if TYPE_CHECKING:
    from conftest import StrictClient

pytestmark = pytest.mark.asyncio

CHECKS = """
import asyncio
from adare_guest.testfunctions import testfunction

VERSION = "v1"

@testfunction(description="reports the collection version")
def version(ctx):
    return f"version {VERSION}"

@testfunction
def at_most(ctx, value: int, limit: int = 3):
    ctx.fail_if(value > limit, f"{value} is above {limit}")
    return f"{value} <= {limit}"

@testfunction
def uses_variable(ctx, key: str):
    ctx.error_if(key not in ctx.variables, f"variable {key} is not set")
    return f"{key}={ctx.variables[key]}"

@testfunction
def crashes(ctx):
    raise RuntimeError("boom")

@testfunction
async def waits(ctx, seconds: float):
    await asyncio.sleep(seconds)
    return f"waited {seconds}"
"""


def make_zip(files: dict[str, str | bytes], symlinks: dict[str, str] | None = None) -> str:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, content in files.items():
            # A ZipInfo keeps the exact name (unsafe ones included) but must ask for deflate.
            archive.writestr(zipfile.ZipInfo(name), content, zipfile.ZIP_DEFLATED)
        for name, target in (symlinks or {}).items():
            info = zipfile.ZipInfo(name)
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            archive.writestr(info, target)
    return base64.b64encode(buffer.getvalue()).decode()


def checks_zip(version: str = "v1") -> str:
    source = textwrap.dedent(CHECKS).replace('VERSION = "v1"', f'VERSION = "{version}"')
    return make_zip({"checks/checks.py": source, "checks/data/readme.txt": "data file"})


def events_of(client: StrictClient, call_id: str) -> list[tuple[str, dict[str, Any]]]:
    return [(e["event_type"], e["data"]) for e in client.events(call_id)]


def list_dir(path: Path) -> list[str]:
    return sorted(p.name for p in path.iterdir()) if path.is_dir() else []


def path_exists(path: str | Path) -> bool:
    return Path(path).exists()


async def run(client: StrictClient, name: str, **params: Any) -> dict[str, Any]:
    return await client.ok("run_test", test_name=name, resolved_test_data=params)


async def run_with_timeout(
    client: StrictClient, name: str, timeout: float, **params: Any
) -> dict[str, Any]:
    """``run_test`` with its own ``timeout`` param (``client.ok`` has one of its own)."""
    envelope = await client.call(
        "run_test", {"test_name": name, "resolved_test_data": params, "timeout": timeout}
    )
    assert envelope["success"], envelope["error"]
    return dict(envelope["result"])


async def test_uploaded_tests_report_every_verdict(client: StrictClient, tmp_path: Path) -> None:
    uploaded = await client.ok("upload_testfunctions", testfunctions_data=checks_zip())
    assert uploaded["status"] == "success", uploaded
    assert uploaded["collections"] == ["checks"]
    assert Path(uploaded["path"]).parent == tmp_path / "run" / "testfunctions"
    assert (Path(uploaded["path"]) / "checks" / "data" / "readme.txt").read_text() == "data file"

    ok = await run(client, "checks.at_most", value=2)
    assert ok["status"] == "success"
    assert ok["result"] == {"status": "SUCCESS", "details": ["2 <= 3"]}
    failed = await run(client, "checks.at_most", value=5, limit=4)
    assert failed["result"] == {"status": "FAILED", "details": ["5 is above 4"]}
    crashed = await run(client, "checks.crashes")
    assert crashed["result"]["status"] == "ERROR"
    assert crashed["result"]["details"][0] == "RuntimeError: boom"
    assert "Traceback" in crashed["result"]["details"][1]
    waited = await run(client, "checks.waits", seconds=0.05)
    assert waited["result"] == {"status": "SUCCESS", "details": ["waited 0.05"]}


async def test_run_test_emits_start_and_outcome_events_with_the_call_id(
    client: StrictClient,
) -> None:
    await client.ok("upload_testfunctions", testfunctions_data=checks_zip())
    passed = await client.call("run_test", {"test_name": "checks.version"})
    failed = await client.call(
        "run_test", {"test_name": "checks.at_most", "resolved_test_data": {"value": 9}}
    )
    passed_events = events_of(client, passed["id"])
    assert [kind for kind, _ in passed_events] == ["test_start", "test_complete"]
    assert passed_events[1][1]["status"] == "SUCCESS"
    assert passed_events[1][1]["test_name"] == "checks.version"
    failed_events = events_of(client, failed["id"])
    assert [kind for kind, _ in failed_events] == ["test_start", "test_failed"]
    assert failed_events[1][1]["details"] == ["9 is above 3"]


async def test_timeout_param_bounds_an_async_test(client: StrictClient) -> None:
    await client.ok("upload_testfunctions", testfunctions_data=checks_zip())
    outcome = await run_with_timeout(client, "checks.waits", 0.5, seconds=60)
    assert outcome["result"]["status"] == "ERROR"
    assert "did not finish within 0.5 s" in outcome["result"]["details"][0]
    bad = await run_with_timeout(client, "checks.version", -1)
    assert bad["status"] == "error" and "timeout" in bad["message"]


async def test_variables_are_visible_to_test_functions(client: StrictClient) -> None:
    await client.ok("upload_testfunctions", testfunctions_data=checks_zip())
    unset = await run(client, "checks.uses_variable", key="target")
    assert unset["result"] == {"status": "ERROR", "details": ["variable target is not set"]}
    assert (await client.ok("set_variables", variables='{"target": "/tmp/x"}'))["status"] == (
        "success"
    )
    await client.ok("set_variables", variables=json.dumps({"other": 1}))
    merged = await run(client, "checks.uses_variable", key="target")
    assert merged["result"]["details"] == ["target=/tmp/x"]
    await client.ok("set_variables", variables='{"other": 2}', replace=True)
    replaced = await run(client, "checks.uses_variable", key="target")
    assert replaced["result"]["status"] == "ERROR"


@pytest.mark.parametrize(
    ("variables", "complaint"),
    [("[1, 2]", "must be a JSON object"), ("{nope", "not valid JSON"), ('"text"', "JSON object")],
)
async def test_set_variables_rejects_anything_but_a_json_object(
    client: StrictClient, variables: str, complaint: str
) -> None:
    answer = await client.ok("set_variables", variables=variables)
    assert answer["status"] == "error"
    assert complaint in answer["message"]


async def test_reupload_replaces_collections_and_cache(client: StrictClient) -> None:
    first = await client.ok("upload_testfunctions", testfunctions_data=checks_zip("v1"))
    assert (await run(client, "checks.version"))["result"]["details"] == ["version v1"]
    second = await client.ok("upload_testfunctions", testfunctions_data=checks_zip("v2"))
    assert (await run(client, "checks.version"))["result"]["details"] == ["version v2"]
    assert not path_exists(first["path"])
    assert path_exists(second["path"])


UNSAFE_NAMES = {
    "absolute": "/etc/adare_pwned.py",
    "drive letter": "C:/Windows/pwned.py",
    "backslash": "checks\\evil.py",
    "dot-dot": "checks/../../escape.py",
}


@pytest.mark.parametrize("name", UNSAFE_NAMES.values(), ids=list(UNSAFE_NAMES))
async def test_archive_with_one_unsafe_name_is_refused_whole(
    client: StrictClient, tmp_path: Path, name: str
) -> None:
    before = await client.ok("upload_testfunctions", testfunctions_data=checks_zip("v1"))
    source = textwrap.dedent(CHECKS).replace('"v1"', '"v2"')
    refused = await client.ok(
        "upload_testfunctions",
        testfunctions_data=make_zip({"checks/checks.py": source, name: "print('pwned')"}),
    )
    assert refused["status"] == "error"
    assert refused["message"].startswith("archive refused:")
    assert repr(name) in refused["message"]
    uploads = tmp_path / "run" / "testfunctions"
    assert [p.name for p in uploads.iterdir()] == [Path(before["path"]).name]
    assert not (tmp_path / "escape.py").exists() and not path_exists("/etc/adare_pwned.py")
    assert (await run(client, "checks.version"))["result"]["details"] == ["version v1"]


async def test_archive_with_a_symlink_is_refused(client: StrictClient) -> None:
    data = make_zip({"checks/checks.py": CHECKS}, symlinks={"checks/passwd": "/etc/passwd"})
    refused = await client.ok("upload_testfunctions", testfunctions_data=data)
    assert refused["status"] == "error"
    assert "symlink" in refused["message"]


async def test_zip_bomb_and_oversized_archives_are_refused(
    client: StrictClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    bomb = make_zip({"checks/checks.py": CHECKS, "checks/zeros.bin": b"\0" * (8 * 1024 * 1024)})
    refused = await client.ok("upload_testfunctions", testfunctions_data=bomb)
    assert refused["status"] == "error" and "compression ratio" in refused["message"]

    monkeypatch.setattr(archive, "MAX_TOTAL_SIZE", 1000)
    big = make_zip({"checks/checks.py": CHECKS, "checks/blob": "x" * 2000})
    refused = await client.ok("upload_testfunctions", testfunctions_data=big)
    assert refused["status"] == "error" and "more than 1000" in refused["message"]

    monkeypatch.setattr(archive, "MAX_MEMBERS", 3)
    many = make_zip({"checks/checks.py": CHECKS, **{f"checks/f{i}": "" for i in range(5)}})
    refused = await client.ok("upload_testfunctions", testfunctions_data=many)
    assert refused["status"] == "error" and "6 entries" in refused["message"]


async def test_corrupt_member_data_is_refused_and_leaves_nothing(
    client: StrictClient, tmp_path: Path
) -> None:
    payload = b"print('payload')\n" * 200
    data = bytearray(base64.b64decode(make_zip({"checks/checks.py": CHECKS, "checks/x": payload})))
    member = data.index(b"checks/x") + len(b"checks/x")  # local header name, then the data
    data[member + 10 : member + 20] = bytes(10)
    refused = await client.ok(
        "upload_testfunctions", testfunctions_data=base64.b64encode(bytes(data)).decode()
    )
    assert refused["status"] == "error" and "corrupt archive" in refused["message"]
    assert list_dir(tmp_path / "run" / "testfunctions") == []


async def test_garbage_uploads_get_clear_errors(client: StrictClient) -> None:
    not_b64 = await client.ok("upload_testfunctions", testfunctions_data="***")
    assert "not valid base64" in not_b64["message"]
    not_zip = await client.ok(
        "upload_testfunctions", testfunctions_data=base64.b64encode(b"plain").decode()
    )
    assert "not a zip archive" in not_zip["message"]
    no_collection = await client.ok(
        "upload_testfunctions", testfunctions_data=make_zip({"loose.py": "x = 1"})
    )
    assert "no collection" in no_collection["message"]


async def test_stock_collection_runs_without_upload(client: StrictClient, tmp_path: Path) -> None:
    target = tmp_path / "note.txt"
    target.write_text("hello adare\n")
    exists = await run(client, "standard.file_exists", path=str(target))
    assert exists["result"]["status"] == "SUCCESS"
    contains = await run(client, "standard.content_contains", path=str(target), text="adare")
    assert contains["result"]["status"] == "SUCCESS"
    absent = await run(client, "standard.file_absent", path=str(target))
    assert absent["result"]["status"] == "FAILED"


async def test_unknown_tests_answer_unknown_with_what_exists(client: StrictClient) -> None:
    answer = await run(client, "nosuch.test")
    assert answer["status"] == "error"
    assert answer["result"]["status"] == "UNKNOWN"
    assert "standard" in answer["message"]
    wrong = await client.call("run_test", {"test_name": 42})
    assert wrong["success"] is False and "test_name" in wrong["error"]
