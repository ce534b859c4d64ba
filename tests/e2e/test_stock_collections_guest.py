"""adare compatibility and the stock collections inside a real QEMU guest.

One VM for the module. The guest's own python3 creates the evidence (a SQLite
database, JSON, JSONL, CSV, XML, a note, and a listening process) with the
script the in-process tests use (tests/agent/stock_scenario.py), then every
stock check runs against it; an adare-style collection is uploaded and run
with raw adare ``run_test`` frames.
"""

from __future__ import annotations

import importlib.util
import textwrap
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from pytest_adare.guest import Guest
from pytest_adare.vm import VM

pytestmark = pytest.mark.e2e

ROOT = "/tmp/adare-evidence"

ADARE_COLLECTION = """
from pathlib import Path

from adarelib.event.event import TestResult
from adarelib.testset.api import testfunction
from adarelib.testset.basictest import HostModeCategory


@testfunction("file_is_gone", "file must not exist", category=HostModeCategory.FILE_BASED)
def file_is_gone(ctx, dst: str):
    path, status = ctx.resolve_globfilepath(dst)
    if status:
        return TestResult.error([status])
    if Path(path).exists():
        return TestResult.failed([f"{path} still exists"])
    return TestResult.success([f"{path} is gone"])
"""


def _scenario() -> ModuleType:
    path = Path(__file__).parents[1] / "agent" / "stock_scenario.py"
    spec = importlib.util.spec_from_file_location("stock_scenario", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


scenario = _scenario()


@pytest.fixture(scope="module")
def evidence(console_vm: VM) -> tuple[Guest, int]:
    """The guest, with the evidence files made by its own python3, and the listener's port."""
    guest = console_vm.guest
    has_sqlite = guest.shell("python3 -c 'import sqlite3, json, xml.etree.ElementTree'")
    assert has_sqlite.returncode == 0, f"guest python3 lacks a module: {has_sqlite.stderr}"
    guest.shell(f"python3 - {ROOT} <<'ADARE_EOF'\n{scenario.MAKE_FILES}\nADARE_EOF").check()
    guest.wait_until_succeeds(f"test -s {ROOT}/port", timeout=10)
    return guest, int(guest.succeed(f"cat {ROOT}/port").strip())


def test_every_stock_check_gives_its_verdict_on_guest_made_files(
    evidence: tuple[Guest, int],
) -> None:
    guest, port = evidence
    wrong = []
    for name, params, expected in scenario.cases(ROOT, port):
        answer = guest.call("run_test", test_name=name, resolved_test_data=params)
        if answer["result"]["status"] != expected:
            wrong.append((name, params, expected, answer["result"]))
    assert not wrong, "\n".join(map(str, wrong))


def test_adare_collection_and_raw_adare_frames(evidence: tuple[Guest, int], tmp_path: Path) -> None:
    guest, _ = evidence
    (tmp_path / "adare_checks").mkdir()
    (tmp_path / "adare_checks" / "adare_checks.py").write_text(textwrap.dedent(ADARE_COLLECTION))
    assert guest.upload_testfunctions(tmp_path)["collections"] == ["adare_checks"]

    def frame(step: str, **test: Any) -> dict[str, Any]:
        data = {
            "name": step,
            "description": "",
            "parameter": {},
            "expect_to_fail": False,
            "timeout": 120.0,
            **test,
        }
        return guest.call("run_test", test_name=step, resolved_test_data=data)

    gone = frame("gone", function="adare_checks.file_is_gone", parameter={"dst": "/tmp/nothing"})
    assert gone["result"] == {"status": "SUCCESS", "details": ["/tmp/nothing is gone"]}
    expected_failure = frame(
        "kept",
        function="adare_checks.file_is_gone",
        parameter={"dst": f"{ROOT}/*.db"},
        expect_to_fail=True,
    )
    assert expected_failure["result"]["status"] == "SUCCESS"
    assert expected_failure["result"]["details"] == [
        f"{ROOT}/history.db still exists",
        "Expected to fail and did fail",
    ]
    bare = frame("json_there", function="file_exists", parameter={"dst": f"{ROOT}/*.json"})
    assert bare["result"]["status"] == "SUCCESS", bare
    timed = guest.run_test(
        "standard.file_content_equals",
        dst=f"{ROOT}/note.txt",
        content="DeletionDate={{ deleted_at }}",
        variables={
            "deleted_at": {
                "value": "2024-05-01T10:00:01",
                "type": "timestamp",
                "tolerance": [-3, 0],
            }
        },
    )
    assert timed.status == "SUCCESS", timed.details
