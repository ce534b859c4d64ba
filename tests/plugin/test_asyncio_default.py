"""Installing the plugin adds no pytest-asyncio warning to projects that never configured it."""

from __future__ import annotations

import pytest

UNSET_WARNING = '"asyncio_default_fixture_loop_scope" is unset'
UNRELATED_TEST = "def test_arithmetic():\n    assert 1 + 1 == 2\n"


def test_an_unrelated_project_runs_without_the_loop_scope_warning(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_unrelated=UNRELATED_TEST)
    result = pytester.runpytest_subprocess("-W", "error")
    result.assert_outcomes(passed=1)
    assert UNSET_WARNING not in result.stdout.str() + result.stderr.str()
    result.stdout.fnmatch_lines(["asyncio: *asyncio_default_fixture_loop_scope=function*"])


def test_without_the_plugin_pytest_asyncio_warns(pytester: pytest.Pytester) -> None:
    # What the plugin spares users: the same project, the plugin disabled.
    pytester.makepyfile(test_unrelated=UNRELATED_TEST)
    result = pytester.runpytest_subprocess("-p", "no:adare")
    assert UNSET_WARNING in result.stdout.str() + result.stderr.str()


@pytest.mark.parametrize("where", ["ini", "-o"])
def test_a_loop_scope_the_user_set_wins(pytester: pytest.Pytester, where: str) -> None:
    pytester.makepyfile(test_unrelated=UNRELATED_TEST)
    args = ["-W", "error"]
    if where == "ini":
        pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = module\n")
    else:
        args += ["-o", "asyncio_default_fixture_loop_scope=module"]
    result = pytester.runpytest_subprocess(*args)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["asyncio: *asyncio_default_fixture_loop_scope=module*"])


def test_async_tests_still_run_on_pytest_asyncio(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_async="""
        import asyncio
        import pytest
        import pytest_asyncio

        @pytest_asyncio.fixture
        async def delay():
            return 0.01

        @pytest.mark.asyncio
        async def test_sleeps(delay):
            await asyncio.sleep(delay)
        """
    )
    result = pytester.runpytest_subprocess("-W", "error")
    result.assert_outcomes(passed=1)
