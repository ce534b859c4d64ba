"""conftest_examples/test_tool_validation.py across two dissect.target versions: the
scenario runs once per test (on the desktop recipe image; the login on debian-xfce),
Dissect twice, and the report and adare-tools.md hold the table of both versions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_adare.cache_dir import cache_root
from tests.analysis.conftest import DISSECT_VERSIONS

# Two desktop scenarios under TCG and Dissect twice each: past the suite's 900 s default.
pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(1800)]

EXAMPLE = Path(__file__).resolve().parents[2] / "conftest_examples" / "test_tool_validation.py"


def test_the_papers_scenarios_are_scored_by_two_dissect_versions(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # pytester's fresh HOME: the images and the tool venvs come from this user's cache.
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache_root().parent))
    out = pytester.path / "out"
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-rA", "--adare-vm=debian", f"--adare-artifacts={out}",
        *[f"--adare-tool={version}" for version in DISSECT_VERSIONS], str(EXAMPLE),
        timeout=1800,
    )  # fmt: skip
    result.assert_outcomes(passed=3)
    header = "| expectation | " + " | ".join(f"`{v}`" for v in DISSECT_VERSIONS) + " |"
    result.stdout.fnmatch_lines(["*Captured adare tools call*", header, "| trash path=*"])
    result.stdout.fnmatch_lines(["*Captured adare tools call*", header, "| recentlyused href=*"])
    result.stdout.fnmatch_lines(["*Captured adare tools call*", header, "| wtmp ut_type=*"])
    document = json.loads((out / "adare-tools.json").read_text())
    assert len(document["tests"]) == 3
    for test, report in document["tests"].items():
        assert [run["tool"] for run in report["runs"]] == list(DISSECT_VERSIONS)
        expected = 3 if "login" in test else 1  # the login: its wtmp record, two journal lines
        assert all(run["counts"]["found"] == expected for run in report["runs"]), report["runs"]
        assert [step["to"] for step in report["version_changes"]] == [DISSECT_VERSIONS[1]]
    assert header in (out / "adare-tools.md").read_text()
