"""A recipe over several suites in the matrix, without a VM (issue 39 item 3): given to
``--adare-vm`` or named by a marker's ``image=``, each test runs once per suite, ids
``web-bullseye`` and ``web-bookworm``, each on its own ``web.toml@SUITE``;
``--adare-vm=web.toml@bullseye`` runs one."""

from __future__ import annotations

import pytest

WEB = 'base = ["debian:bullseye", "debian:bookworm"]\ninstall = ["python3-yaml"]\n'
TESTS = """
def test_web(adare_image):
    print("IMAGE", adare_image.name, adare_image.spec)
"""


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("-p", "no:cacheprovider", "-s", "-v", *args)


def test_given_to_adare_vm_the_tests_run_on_each_suite(pytester: pytest.Pytester) -> None:
    (pytester.path / "web.toml").write_text(WEB)
    pytester.makepyfile(test_web=TESTS)
    result = run(pytester, "--adare-vm=web.toml")
    result.assert_outcomes(passed=2)
    web = pytester.path / "web.toml"
    result.stdout.fnmatch_lines(
        [
            f"adare: images {web}@bullseye, {web}@bookworm, accel*",
            f"*test_web[[]web-bullseye[]] IMAGE web-bullseye {web}@bullseye",
            "PASSED",
            f"*test_web[[]web-bookworm[]] IMAGE web-bookworm {web}@bookworm",
            "PASSED",
        ]
    )
    one = run(pytester, "--adare-vm=web.toml@bookworm")
    one.assert_outcomes(passed=1)
    one.stdout.fnmatch_lines([f"*::test_web IMAGE web-bookworm {web}@bookworm", "PASSED"])


def test_named_by_a_marker_it_runs_on_each_suite(pytester: pytest.Pytester) -> None:
    (pytester.path / "service").mkdir()
    (pytester.path / "service" / "web.toml").write_text(WEB)
    pytester.makepyfile(
        test_marked="""
        import pytest

        @pytest.mark.adare_vm(image="service/web.toml")
        def test_web(adare_image):
            print("IMAGE", adare_image.name, adare_image.spec)
        """
    )
    result = run(pytester, "--adare-vm=debian")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        [
            "*test_web[[]web-bullseye[]] IMAGE web-bullseye */service/web.toml@bullseye",
            "PASSED",
            "*test_web[[]web-bookworm[]] IMAGE web-bookworm */service/web.toml@bookworm",
            "PASSED",
        ]
    )


def test_beside_other_images_each_suite_is_one_more(pytester: pytest.Pytester) -> None:
    (pytester.path / "web.toml").write_text(WEB)
    pytester.makepyfile(test_web=TESTS)
    result = pytester.runpytest(
        "-p", "no:cacheprovider", "--adare-vm=debian", "--adare-vm=web.toml", "--collect-only", "-q"
    )
    result.stdout.fnmatch_lines(
        ["*test_web[[]debian[]]", "*test_web[[]web-bullseye[]]", "*test_web[[]web-bookworm[]]"]
    )
