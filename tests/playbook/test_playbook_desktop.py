"""The GUI actions on the built-in desktop: two experiments that delete a file through
the terminal, found on the screen by its text (with idle waits, and with wait_until)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

EXPERIMENTS = Path(__file__).parent / "experiments"


def test_gui_experiments_pass_on_the_desktop(pytester: pytest.Pytester) -> None:
    desktop = os.environ.get("ADARE_TEST_DESKTOP", "debian-desktop")
    for name in ("desktop_deletefile", "desktop_deletefile_wait_until"):
        shutil.copytree(EXPERIMENTS / name, pytester.path / name)
    artifacts = pytester.path / "artifacts"
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-rA", f"--adare-artifacts={artifacts}",
        f"--adare-environments=desktop={desktop}", timeout=1500,
    )  # fmt: skip
    result.assert_outcomes(passed=2)
    for found in artifacts.rglob("playbook-results.json"):
        results = json.loads(found.read_text())
        kinds = {a["kind"] for a in results["actions"]}
        assert [t["name"] for t in results["tests"]] == ["testfile_created", "testfile_deleted"]
        assert kinds >= {"keyboard", "test"} and kinds & {"click", "goto"}
        assert all(a["result"] == "ok" for a in results["actions"])
