"""The example scenarios on the XFCE desktop (debian-xfce): the playbooks, the Thunar and
Mousepad experiments and their tool validation, one inner run sharing one desktop VM.
The other examples run in tests/e2e/test_plugin_e2e.py; its own module, so the two
xdist workers run both at once.

The tool validation scores each scenario with the two dissect.target versions of
tests/analysis/dissect-versions.txt (``--adare-tool`` twice; scripts/test builds their
environments), so this one run also proves the version table of the report and of
adare-tools.json/.md on the paper's scenarios. A run without ``--adare-tool`` (the
dissect installed beside pytest) is tests/analysis/test_tool_validation_plugin.py's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.analysis.conftest import DISSECT_VERSIONS
from tests.e2e.test_plugin_e2e import EXAMPLES, XFCE_EXAMPLES, run_examples

pytestmark = pytest.mark.e2e


def test_the_xfce_examples_pass_and_two_dissect_versions_score_the_papers_scenarios(
    pytester: pytest.Pytester, test_image: str
) -> None:
    out = pytester.path / "out"
    tools = [f"--adare-tool={version}" for version in DISSECT_VERSIONS]
    result = run_examples(pytester, test_image, "-rA", f"--adare-artifacts={out}", *tools,
                          *[str(EXAMPLES / name) for name in XFCE_EXAMPLES])  # fmt: skip
    # two playbooks, three XFCE experiments, three tool validations
    assert result.parseoutcomes().get("passed", 0) == 8, result.stdout.str()
    _check_the_version_tables(result, out)


def _check_the_version_tables(result: pytest.RunResult, out: Path) -> None:
    header = "| expectation | " + " | ".join(f"`{v}`" for v in DISSECT_VERSIONS) + " |"
    # The Trash scenario's table has the test's own fls run as a third column.
    with_fls = header + " `fls` |"
    result.stdout.fnmatch_lines(["*Captured adare tools call*", with_fls, "| trash path=*"])
    result.stdout.fnmatch_lines(["*| file path=/home/user/.local/share/Trash/files/report.txt "
                                 "deleted=False | not judged | not judged | found: *"])  # fmt: skip
    result.stdout.fnmatch_lines(["*Captured adare tools call*", header, "| recentlyused href=*"])
    result.stdout.fnmatch_lines(["*Captured adare tools call*", header, "| wtmp ut_type=*"])
    document = json.loads((out / "adare-tools.json").read_text())
    assert len(document["tests"]) == 3, sorted(document["tests"])
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
