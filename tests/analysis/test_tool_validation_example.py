"""conftest_examples/test_tool_validation.py across two dissect.target versions: the
scenario runs once per test (on the desktop recipe image; the login on debian-xfce),
Dissect twice, and the report and adare-tools.md hold the table of both versions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_adare.cache_dir import cache_root
from tests.analysis.conftest import DISSECT_VERSIONS
from tests.inner_run import run_inner_pytest

# Two desktop scenarios under TCG and Dissect twice each: past the suite's 900 s default.
pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(1800)]

EXAMPLE = Path(__file__).resolve().parents[2] / "conftest_examples" / "test_tool_validation.py"


def test_the_papers_scenarios_are_scored_by_two_dissect_versions(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # pytester's fresh HOME: the images and the tool venvs come from this user's cache.
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache_root().parent))
    out = pytester.path / "out"
    result = run_inner_pytest(
        pytester,
        "-p", "no:cacheprovider", "-rA", "--adare-vm=debian", f"--adare-artifacts={out}",
        *[f"--adare-tool={version}" for version in DISSECT_VERSIONS], str(EXAMPLE),
        timeout=1800,
    )  # fmt: skip
    result.assert_outcomes(passed=3)
    header = "| expectation | " + " | ".join(f"`{v}`" for v in DISSECT_VERSIONS) + " |"
    # The Trash scenario's table has the test's own fls run as a third column.
    with_fls = header + " `fls` |"
    result.stdout.fnmatch_lines(["*Captured adare tools call*", with_fls, "| trash path=*"])
    result.stdout.fnmatch_lines(["*| file path=/home/user/.local/share/Trash/files/report.txt "
                                 "deleted=False | not judged | not judged | found: *"])  # fmt: skip
    result.stdout.fnmatch_lines(["*Captured adare tools call*", header, "| recentlyused href=*"])
    result.stdout.fnmatch_lines(["*Captured adare tools call*", header, "| wtmp ut_type=*"])
    document = json.loads((out / "adare-tools.json").read_text())
    assert len(document["tests"]) == 3
    for test, report in document["tests"].items():
        dissect = [run for run in report["runs"] if run["tool"] != "fls"]
        assert [run["tool"] for run in dissect] == list(DISSECT_VERSIONS)
        expected = 3 if "login" in test else 1  # the login: its wtmp record, two journal lines
        assert all(run["counts"]["found"] == expected for run in dissect), report["runs"]
        # Versions are compared within the step's runs, never against fls.
        assert [step["to"] for step in report["version_changes"]] == [DISSECT_VERSIONS[1]]
        fls = [run for run in report["runs"] if run["tool"] == "fls"]
        assert (len(fls) == 1) == ("trash" in test), report["runs"]
        if fls:  # the Trash's two files, and the folders the move made, at least
            assert fls[0]["counts"]["found"] >= 2, fls
    assert header in (out / "adare-tools.md").read_text()
