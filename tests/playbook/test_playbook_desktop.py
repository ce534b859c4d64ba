"""The GUI actions on the built-in desktop: two experiments that delete a file through
the terminal, found on the screen by its text (with idle waits, and with wait_until),
and one that clicks, drags and scrolls on a board program, found by a needle image
(``img/source.png``, cut from a screenshot of the board) and by its text."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tests.inner_run import run_inner_pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

EXPERIMENTS = Path(__file__).parent / "experiments"


def test_gui_experiments_pass_on_the_desktop(pytester: pytest.Pytester) -> None:
    desktop = os.environ.get("ADARE_TEST_DESKTOP", "debian-desktop")
    for name in ("desktop_deletefile", "desktop_deletefile_wait_until", "desktop_drag_scroll"):
        shutil.copytree(EXPERIMENTS / name, pytester.path / name)
    artifacts = pytester.path / "artifacts"
    result = run_inner_pytest(
        pytester,
        "-p", "no:cacheprovider", "-rA", f"--adare-artifacts={artifacts}",
        f"--adare-environments=desktop={desktop}", timeout=1500,
    )  # fmt: skip
    result.assert_outcomes(passed=3)
    found = {path.parent.name: json.loads(path.read_text())
             for path in artifacts.rglob("playbook-results.json")}  # fmt: skip
    assert len(found) == 3, sorted(found)
    for folder, results in found.items():
        kinds = {a["kind"] for a in results["actions"]}
        assert all(a["result"] == "ok" for a in results["actions"]), folder
        if "drag_scroll" in folder:
            assert kinds >= {"wait_until", "click", "drag", "goto", "scroll", "test"}
            assert [t["name"] for t in results["tests"]] == [
                "needle_clicked", "dropped_on_the_text_target", "wheel_turned_down"
            ]  # fmt: skip
        else:
            assert [t["name"] for t in results["tests"]] == ["testfile_created", "testfile_deleted"]
            assert kinds >= {"keyboard", "test"} and kinds & {"click", "goto"}
