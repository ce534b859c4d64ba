"""A LAN test's reports name its members by their hostnames: the progress lines as each
starts, and every section of the failure evidence (an inner pytest run, two members)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.e2e

FAILING_LAN_TEST = """
def test_members_disagree(adare_lan):
    lan = adare_lan(subnet="10.77.0.0/24")
    server = lan.start("server")
    client = lan.start("client")
    assert server.guest.succeed("hostname") == client.guest.succeed("hostname")
"""


def test_members_are_named_by_their_hostnames_in_progress_and_failure_sections(
    pytester: pytest.Pytester, test_image: str
) -> None:
    pytester.makepyfile(test_lan_names=FAILING_LAN_TEST)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", f"--adare-vm={test_image}", timeout=900
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["adare: starting server: *", "adare: server ready in *", "adare: starting client: *"]
    )
    for member in ("server", "client"):
        result.stdout.fnmatch_lines(
            [
                f"*- adare console tail ({member}: {test_image} *) -*",
                f"*- adare agent log tail ({member}: {test_image} *) -*",
                f"*adare screenshot ({member}: {test_image} *)*",
            ]
        )
    assert "extra0" not in result.stdout.str()
