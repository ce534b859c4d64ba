"""Forwarded ports through the plugin, as a CI user runs it: ``adare_vm(ports=[8000])`` on
every test, two xdist workers each with its own VM: the host ports never collide, each
test's service answers its own page through the forward after the per-test restore took
the previous test's server away, and the forward keeps its host port across restores."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

INNER_TIMEOUT = 900

SERVICE_TESTS = """
import os
import urllib.request

import pytest

pytestmark = pytest.mark.adare_vm(ports=[8000])


@pytest.mark.parametrize("n", range(4))
def test_the_service_answers_the_host(guest, n):
    # The restore of the ready state took the previous test's server and files away.
    guest.succeed(f"test ! -e /tmp/site/p && mkdir -p /tmp/site && echo page-{n} > /tmp/site/p")
    guest.shell("cd /tmp/site && exec python3 -m http.server 8000", background=True).check()
    guest.wait_for_port(8000, timeout=300, from_host=True)  # python under TCG: slow
    with urllib.request.urlopen(guest.url(8000, "/p"), timeout=60) as answer:
        assert answer.read() == f"page-{n}\\n".encode()
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with open(f"ports-{worker}.txt", "a") as out:
        out.write(f"{guest.port(8000)[1]}\\n")
"""


def test_two_workers_forward_the_same_guest_port_without_colliding(
    pytester: pytest.Pytester, test_image: str
) -> None:
    pytester.makepyfile(test_service=SERVICE_TESTS)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-n", "2",
        f"--adare-vm={test_image}", timeout=INNER_TIMEOUT,
    )  # fmt: skip
    result.assert_outcomes(passed=4)
    ports = {
        path.name: set(path.read_text().split()) for path in Path(pytester.path).glob("ports-*")
    }
    assert set(ports) == {"ports-gw0.txt", "ports-gw1.txt"}, result.outlines
    # One host port per worker's VM, kept across its restores, and not the other's.
    assert all(len(seen) == 1 for seen in ports.values()), ports
    assert ports["ports-gw0.txt"] != ports["ports-gw1.txt"]
