"""The plugin's side: the ground_truth fixture, the report table, adare-tools.json/.md,
--adare-tool and --adare-tools-baseline, as a user's pytest run sees them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.analysis.conftest import HOME, Disk

TEST = """
import datetime as dt

def step(target):
    return {{"trash": target.trash()}}

def test_trash(ground_truth):
    ground_truth.expect("trash", path="{home}/Documents/report.txt",
                        ts=dt.datetime.fromisoformat("{when}"), tolerance=1)
    ground_truth.expect("trash", path="{home}/Documents/never.txt")
    score, = ground_truth.validate(step, "{disk}").values()
    assert len(score.found) == 1 and len(score.missed) == 1
"""


def _run(pytester: pytest.Pytester, disk: Disk, *args: str) -> pytest.RunResult:
    pytester.makepyfile(
        test_scenario=TEST.format(home=HOME, when=disk.deleted_at.isoformat(), disk=disk.path)
    )
    return pytester.runpytest_subprocess(f"--adare-artifacts={pytester.path}/out", "-rA", *args)


def test_the_report_holds_the_table_and_the_session_writes_adare_tools(
    pytester: pytest.Pytester, desktop_disk: Disk
) -> None:
    result = _run(pytester, desktop_disk)
    result.assert_outcomes(passed=1)
    missed = f"| trash path={HOME}/Documents/never.txt | missed: (no record) |"
    result.stdout.fnmatch_lines(["*adare tools*", "| expectation | `installed` |", missed])
    document = json.loads((pytester.path / "out" / "adare-tools.json").read_text())
    (report,) = document["tests"].values()
    assert report["runs"][0]["counts"]["found"] == 1
    markdown = (pytester.path / "out" / "adare-tools.md").read_text()
    assert "found: ts=" in markdown


def test_the_baseline_lists_the_verdicts_that_changed(
    pytester: pytest.Pytester, desktop_disk: Disk, tmp_path: Path
) -> None:
    _run(pytester, desktop_disk).assert_outcomes(passed=1)
    old = json.loads((pytester.path / "out" / "adare-tools.json").read_text())
    (report,) = old["tests"].values()
    report["expectations"][1]["tools"]["installed"]["verdict"] = "found"
    baseline = tmp_path / "old.json"
    baseline.write_text(json.dumps(old))
    _run(pytester, desktop_disk, f"--adare-tools-baseline={baseline}").assert_outcomes(passed=1)
    markdown = (pytester.path / "out" / "adare-tools.md").read_text()
    assert "never.txt [installed]: found -> missed" in markdown


def test_a_tool_that_is_no_requirement_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_nothing(): pass")
    result = pytester.runpytest_subprocess("--adare-tool===3")
    result.stderr.fnmatch_lines(["*--adare-tool: '==3' is not a pip requirement*"])
    assert result.ret == pytest.ExitCode.USAGE_ERROR
