"""scripts/test's skip gate: a skip these machines do not explain fails the run."""

from __future__ import annotations

import pytest

TESTS = '''
import pytest

def test_runs():
    pass

def test_needs_a_tool():
    pytest.skip("needs nft (nftables)")

@pytest.mark.skipif(True, reason="no /dev/kvm here")
def test_needs_kvm():
    pass

@pytest.fixture
def kvm():
    pytest.skip("no usable /dev/kvm: auto is TCG without a probe")

def test_needs_kvm_through_a_fixture(kvm):
    pass

@pytest.mark.xfail(reason="known bug", strict=True)
def test_known_bug():
    assert False
'''


def test_only_allowed_skips_pass_and_an_unexpected_one_fails_naming_it(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_gate=TESTS)
    result = pytester.runpytest("-p", "tests.unexpected_skips")
    result.assert_outcomes(passed=1, failed=1, skipped=2, xfailed=1)
    result.stdout.fnmatch_lines(
        ["*unexpected skip at *test_gate.py:7: needs nft (nftables)*", "*scripts/setup*"]
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED


def test_without_the_gate_the_same_skip_passes(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_gate=TESTS)
    pytester.runpytest().assert_outcomes(passed=1, skipped=3, xfailed=1)
