"""``adare_checks`` from the outside: every check reported as one table, the test failed
at its end when one failed (host-side checks; guest functions run in the examples), and
on a VM the failure gets the same evidence as a failed ``assert``."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

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


SOFT_FAILURE_ON_A_VM = """
def test_a_check_fails_on_the_guest(guest, adare_checks):
    release = guest.shell("cat /etc/os-release").check().stdout
    adare_checks.check("NAME=" in release, "os-release has a NAME")
    adare_checks.check("ID=windows" in release, "the guest is Windows", detail="it is not")
"""


@pytest.mark.e2e
def test_a_soft_check_failure_gets_the_whole_failure_evidence(
    pytester: pytest.Pytester, test_image: str, tmp_path: Path
) -> None:
    pytester.makepyfile(test_soft_vm=SOFT_FAILURE_ON_A_VM)
    artifacts = tmp_path / "artifacts"
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", f"--adare-vm={test_image}", f"--adare-artifacts={artifacts}",
        timeout=600,
    )  # fmt: skip
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*soft checks failed: 1 of 2 checks failed*"])
    result.stdout.fnmatch_lines(["*- adare console tail -*"])
    result.stdout.fnmatch_lines(["*adare screenshot*", "*screendump: *screenshot.png*"])
    result.stdout.fnmatch_lines(["*adare recording*", "*recording.webp: *"])
    result.stdout.fnmatch_lines(["*adare artifacts*"])
    evidence = artifacts / "test_soft_vm.py_test_a_check_fails_on_the_guest"
    assert {p.name for p in evidence.iterdir()} >= {
        "console.log", "agent.log", "screenshot.png", "recording.webp",
    }  # fmt: skip
