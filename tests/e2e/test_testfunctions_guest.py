"""Guest test functions through a real QEMU guest: upload, variables, every verdict.

One VM for the module; the collections are written into ``tmp_path`` as a user
would write them and uploaded with ``guest.upload_testfunctions``.
"""

from __future__ import annotations

import base64
import hashlib
import io
import textwrap
import zipfile
from pathlib import Path

import pytest

from pytest_adare.agent.testfunction_upload import assert_outcome
from pytest_adare.errors import ToolError
from pytest_adare.guest import Guest, TestOutcome
from pytest_adare.vm import VM

pytestmark = pytest.mark.e2e

MISSING_MODULE = "adare_e2e_missing_dep"

CHECKS = """
import asyncio
import time

from adare_guest.testfunctions import testfunction


@testfunction
def content_is(ctx, path, expected):
    with open(path) as handle:
        actual = handle.read()
    ctx.fail_if(actual != expected, f"{path} holds {actual!r}, not {expected!r}")
    return f"{path} holds {expected!r}"


@testfunction
def plain_assert(ctx, value):
    assert value == 1, f"value is {value}"


@testfunction
def cannot_check(ctx):
    ctx.error_if(True, "the check could not be made")


@testfunction
def crashes(ctx):
    raise RuntimeError("boom inside the guest")


@testfunction(timeout=1)
def sleeps_too_long(ctx):
    time.sleep(20)


@testfunction(timeout=1)
async def awaits_too_long(ctx):
    await asyncio.sleep(20)


@testfunction
async def awaits(ctx, delay):
    await asyncio.sleep(delay)
    return ["awaited", delay]


@testfunction
def reads_variables(ctx):
    return [f"{name}={ctx.variables[name]!r}" for name in sorted(ctx.variables)]


@testfunction
def warns(ctx):
    ctx.warn_if(True, "something smells")
    return "done"
"""

NEEDS_DEP = f"""
import {MISSING_MODULE}

from adare_guest.testfunctions import testfunction


@testfunction
def uses_dep(ctx):
    return {MISSING_MODULE}.ANSWER
"""


@pytest.fixture(scope="module")
def collections(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding the ``checks`` and ``needs_dep`` collections."""
    root = tmp_path_factory.mktemp("collections")
    for name, source in {"checks": CHECKS, "needs_dep": NEEDS_DEP}.items():
        (root / name).mkdir()
        (root / name / f"{name}.py").write_text(textwrap.dedent(source))
    return root


@pytest.fixture(scope="module")
def uploaded(console_vm: VM, collections: Path) -> Guest:
    """The guest with ``collections`` uploaded."""
    answer = console_vm.guest.upload_testfunctions(collections)
    assert sorted(answer["collections"]) == ["checks", "needs_dep"]
    return console_vm.guest


def test_success_carries_the_returned_detail(uploaded: Guest) -> None:
    uploaded.shell("printf 'written by the shell' > /tmp/tf-content").check()
    outcome = uploaded.run_test(
        "checks.content_is", path="/tmp/tf-content", expected="written by the shell"
    )
    assert outcome == TestOutcome("SUCCESS", ["/tmp/tf-content holds 'written by the shell'"])
    assert outcome.passed


def test_fail_if_and_plain_assert_are_failed(uploaded: Guest) -> None:
    uploaded.shell("printf other > /tmp/tf-other").check()
    outcome = uploaded.run_test("checks.content_is", path="/tmp/tf-other", expected="x")
    assert outcome == TestOutcome("FAILED", ["/tmp/tf-other holds 'other', not 'x'"])
    asserted = uploaded.run_test("checks.plain_assert", value=2)
    assert asserted.status == "FAILED"
    assert asserted.details[0] == "value is 2"


def test_error_if_and_exceptions_are_errors(uploaded: Guest) -> None:
    assert uploaded.run_test("checks.cannot_check") == TestOutcome(
        "ERROR", ["the check could not be made"]
    )
    crashed = uploaded.run_test("checks.crashes")
    assert crashed.status == "ERROR"
    assert "RuntimeError" in "\n".join(crashed.details)
    assert "boom inside the guest" in "\n".join(crashed.details)


def test_bad_parameters_are_an_error_naming_them(uploaded: Guest) -> None:
    outcome = uploaded.run_test("checks.content_is", path="/tmp/x")
    assert outcome.status == "ERROR"
    assert "expected" in "\n".join(outcome.details)


def test_sync_and_async_timeouts_are_errors(uploaded: Guest) -> None:
    for name in ("checks.sleeps_too_long", "checks.awaits_too_long"):
        outcome = uploaded.run_test(name)
        assert outcome.status == "ERROR", name
        assert "did not finish within 1" in "\n".join(outcome.details), outcome
    assert uploaded.shell("true").returncode == 0  # the agent still answers


def test_async_test_function_is_awaited(uploaded: Guest) -> None:
    assert uploaded.run_test("checks.awaits", delay=0.2) == TestOutcome(
        "SUCCESS", ["awaited", "0.2"]
    )


def test_warning_passes_the_helper_with_a_warning(uploaded: Guest) -> None:
    outcome = uploaded.run_test("checks.warns")
    assert outcome.status == "WARNING"
    assert any("something smells" in line for line in outcome.details)
    with pytest.warns(UserWarning, match="something smells"):
        assert_outcome(outcome, "checks.warns")


def test_set_variables_are_visible_to_the_test(uploaded: Guest) -> None:
    uploaded.set_variables({"target": "/srv/data", "retries": 3})
    uploaded.set_variables({"mode": {"strict": True}})
    outcome = uploaded.run_test("checks.reads_variables")
    assert outcome.status == "SUCCESS"
    assert {"target='/srv/data'", "retries=3", "mode={'strict': True}"} <= set(outcome.details)


def unknown_test_report(guest: Guest, name: str) -> str:
    """What the facade says about a test that does not exist (UNKNOWN outcome or ToolError)."""
    try:
        outcome = guest.run_test(name)
    except ToolError as error:
        return str(error)
    assert outcome.status == "UNKNOWN", outcome
    return "\n".join(outcome.details)


def test_unknown_test_is_reported_not_run(uploaded: Guest) -> None:
    report = unknown_test_report(uploaded, "checks.no_such_test")
    assert "no_such_test" in report


def tiny_wheel(directory: Path) -> Path:
    """A pure-Python wheel providing MISSING_MODULE (so pip needs no network)."""
    name, version = MISSING_MODULE, "1.0"
    files = {
        f"{name}/__init__.py": b"ANSWER = 'installed from a wheel'\n",
        f"{name}-{version}.dist-info/METADATA": (
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode()
        ),
        f"{name}-{version}.dist-info/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: adare-e2e\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = [
        f"{path},sha256="
        + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        + f",{len(data)}"
        for path, data in files.items()
    ]
    record.append(f"{name}-{version}.dist-info/RECORD,,")
    files[f"{name}-{version}.dist-info/RECORD"] = ("\n".join(record) + "\n").encode()
    wheel = directory / f"{name}-{version}-py3-none-any.whl"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
    wheel.write_bytes(buffer.getvalue())
    return wheel


def test_missing_dependency_is_an_error_naming_the_module(uploaded: Guest) -> None:
    outcome = uploaded.run_test("needs_dep.uses_dep")
    assert outcome.status == "ERROR"
    assert f"No module named '{MISSING_MODULE}'" in "\n".join(outcome.details)


def test_install_dependencies_makes_the_collection_load(uploaded: Guest, tmp_path: Path) -> None:
    assert uploaded.run_test("needs_dep.uses_dep").status == "ERROR"
    wheel = tiny_wheel(tmp_path)
    uploaded.push(wheel, f"/tmp/{wheel.name}")
    installed = uploaded.install_dependencies([f"/tmp/{wheel.name}"])
    assert installed["returncode"] == 0
    try:
        after = uploaded.run_test("needs_dep.uses_dep")  # a broken collection is not cached
        assert after == TestOutcome("SUCCESS", ["installed from a wheel"])
    finally:
        uploaded.shell(f"rm -rf /adare/run/site-packages/{MISSING_MODULE}*")


def test_stock_standard_collection(uploaded: Guest) -> None:
    uploaded.shell("printf 'hello e2e' > /tmp/std.txt && chmod 640 /tmp/std.txt").check()
    sha = hashlib.sha256(b"hello e2e").hexdigest()
    mtime = float(uploaded.shell("stat -c %Y /tmp/std.txt").check().stdout)
    expectations = {
        ("file_exists", (("path", "/tmp/std.txt"), ("type", "file"))): "SUCCESS",
        ("file_exists", (("path", "/tmp/std.txt"), ("type", "dir"))): "FAILED",
        ("file_absent", (("path", "/tmp/not-there"),)): "SUCCESS",
        ("file_absent", (("path", "/tmp/std.txt"),)): "FAILED",
        ("content_equals", (("path", "/tmp/std.txt"), ("expected", "hello e2e"))): "SUCCESS",
        ("content_contains", (("path", "/tmp/std.txt"), ("text", "bye"))): "FAILED",
        ("content_matches", (("path", "/tmp/std.txt"), ("pattern", r"^hel+o"))): "SUCCESS",
        ("sha256_equals", (("path", "/tmp/std.txt"), ("sha256", sha.upper()))): "SUCCESS",
        ("mode_equals", (("path", "/tmp/std.txt"), ("mode", "640"))): "SUCCESS",
        ("mode_equals", (("path", "/tmp/std.txt"), ("mode", "644"))): "FAILED",
        ("owner_equals", (("path", "/tmp/std.txt"), ("user", "root"), ("gid", 0))): "SUCCESS",
        ("timestamp_within", (("path", "/tmp/std.txt"), ("expected", mtime))): "SUCCESS",
        ("timestamp_within", (("path", "/tmp/std.txt"), ("expected", mtime - 60))): "FAILED",
        ("content_equals", (("path", "/tmp"), ("expected", ""))): "ERROR",
        ("content_equals", (("path", "/tmp/not-there"), ("expected", ""))): "FAILED",
    }
    actual = {
        (name, params): uploaded.run_test(f"standard.{name}", **dict(params)).status
        for name, params in expectations
    }
    assert actual == expectations


def test_assert_outcome_turns_failed_and_error_into_pytest_failures(uploaded: Guest) -> None:
    assert_outcome(uploaded.run_test("checks.awaits", delay=0), "checks.awaits")
    uploaded.shell("printf other > /tmp/tf-other").check()
    failed = uploaded.run_test("checks.content_is", path="/tmp/tf-other", expected="x")
    with pytest.raises(pytest.fail.Exception) as raised:
        assert_outcome(failed, "checks.content_is")
    assert "checks.content_is FAILED" in str(raised.value)
    assert "/tmp/tf-other holds 'other', not 'x'" in str(raised.value)
    errored = uploaded.run_test("checks.crashes")
    with pytest.raises(pytest.fail.Exception, match=r"(?s)checks.crashes ERROR.*boom inside"):
        assert_outcome(errored, "checks.crashes")


def test_reupload_replaces_the_collection(
    uploaded: Guest, collections: Path, tmp_path: Path
) -> None:
    collection = tmp_path / "checks"
    collection.mkdir()
    (collection / "checks.py").write_text(
        "from adare_guest.testfunctions import testfunction\n\n"
        "@testfunction\ndef version(ctx):\n    return 'second upload'\n"
    )
    try:
        uploaded.upload_testfunctions(collection)
        assert uploaded.run_test("checks.version") == TestOutcome("SUCCESS", ["second upload"])
        assert "awaits" in unknown_test_report(uploaded, "checks.awaits")
        assert "needs_dep" in unknown_test_report(uploaded, "needs_dep.uses_dep")
    finally:
        uploaded.upload_testfunctions(collections)
    assert uploaded.run_test("checks.awaits", delay=0).passed
