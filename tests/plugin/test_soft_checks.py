"""``adare_checks`` from the outside: every check reported as one table, the test failed
at its end when one failed (host-side checks; guest functions run in the examples)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

TESTS = """
def test_all_pass(adare_checks):
    adare_checks.check(1 + 1 == 2, "arithmetic")
    adare_checks.check("x" in "xyz", "membership", detail="x in xyz")

def test_two_of_three_fail(adare_checks):
    adare_checks.check(False, "trash info written", detail="/home/user/.local/share/Trash/info")
    adare_checks.check(True, "file gone")
    adare_checks.check(0, "deletion date within 5 s", detail="off by 7.2 s")
    print("the test went on after the failed checks")

def test_fails_on_its_own(adare_checks):
    adare_checks.check(False, "soft one")
    assert 1 == 2, "the hard assert"

def test_a_check_needs_a_label(adare_checks):
    adare_checks.check(True, "  ")
"""


def test_failed_checks_fail_the_test_with_the_whole_table(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(TESTS)
    result = pytester.runpytest("-rA", "--junitxml=report.xml")
    result.assert_outcomes(passed=1, failed=3)
    out = result.stdout.str()
    assert "the test went on after the failed checks" in out
    result.stdout.re_match_lines([
        r".*soft checks failed: 2 of 3 checks failed",
        r"\s+label\s+verdict\s+details",
        r"\s+trash info written\s+FAILED\s+/home/user/.local/share/Trash/info",
        r"\s+file gone\s+PASSED",
        r"\s+deletion date within 5 s\s+FAILED\s+off by 7.2 s",
    ])  # fmt: skip
    assert "AssertionError: the hard assert" in out  # its own failure is kept
    assert "a check needs a label" in out
    # Passing tests show their table too (-rA shows the section).
    result.stdout.re_match_lines([r".*adare checks.*", r"0 of 2 checks failed"])

    cases = {
        case.get("name"): case for case in ET.parse(pytester.path / "report.xml").iter("testcase")
    }
    [prop] = cases["test_two_of_three_fail"].iter("property")
    assert prop.get("name") == "adare_checks"
    recorded = json.loads(prop.get("value") or "")
    assert [(c["label"], c["passed"], c["verdict"]) for c in recorded] == [
        ("trash info written", False, "FAILED"),
        ("file gone", True, "PASSED"),
        ("deletion date within 5 s", False, "FAILED"),
    ]
