"""``--adare-pcap`` and ``--adare-evidence`` from the outside: option parsing (no VM),
and one inner run on a real guest where only the failing test gets a bundle."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from pytest_adare.forensics.evidence_bundle import MANIFEST_FILE, verify_bundle
from pytest_adare.plugin.fixtures import sanitise_nodeid
from pytest_adare.plugin.options import AdareOptions, apply_marker

# The loopback HTTP server and the pcap reader are shared with the e2e tests.
sys.path.insert(0, str(Path(__file__).parents[1] / "e2e"))
from hypervisor_tools import loopback_http_server, tcp_payloads

INNER_TIMEOUT = 600

OPTION_PROBE = """
from pytest_adare.plugin.options import adare_options

def test_probe(pytestconfig):
    options = adare_options(pytestconfig)
    print(f"OPTIONS pcap={options.pcap} evidence={options.evidence}")
"""

TWO_TESTS = """
import os

def test_passes_quietly(guest):
    guest.shell("true").check()

def test_phones_home_then_fails(guest):
    url = os.environ["PHONE_HOME_URL"]
    code = f"import urllib.request as u; u.urlopen({url!r}).read()"
    guest.shell(f"python3 -c \\"{code}\\"").check()
    assert guest.shell("echo hi").stdout == "bye\\n"
"""


@pytest.mark.parametrize(
    ("args", "ini", "expected"),
    [
        ((), "", "pcap=False evidence=off"),
        (("--adare-pcap", "--adare-evidence=always"), "", "pcap=True evidence=always"),
        ((), "adare_pcap = yes\nadare_evidence = on-failure", "pcap=True evidence=on-failure"),
    ],
)
def test_options_from_flags_and_ini(
    pytester: pytest.Pytester, args: tuple[str, ...], ini: str, expected: str
) -> None:
    pytester.makeini(f"[pytest]\n{ini}\n")
    pytester.makepyfile(test_probe=OPTION_PROBE)
    result = pytester.runpytest_subprocess("-s", "-p", "no:cacheprovider", *args)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([f"*OPTIONS {expected}"])


@pytest.mark.parametrize(
    ("args", "ini", "message"),
    [
        (("--adare-evidence=sometimes",), "", "--adare-evidence: 'sometimes' is not one of off*"),
        ((), "adare_pcap = maybe", "ini key adare_pcap: expected true or false, got 'maybe'"),
    ],
)
def test_bad_values_are_usage_errors(
    pytester: pytest.Pytester, args: tuple[str, ...], ini: str, message: str
) -> None:
    pytester.makeini(f"[pytest]\n{ini}\n")
    pytester.makepyfile(test_probe=OPTION_PROBE)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{message}*"])


@pytest.mark.e2e
def test_on_failure_bundles_only_the_failing_test_and_pcap_covers_both(
    pytester: pytest.Pytester, test_image: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_scenario=TWO_TESTS)
    artifacts = tmp_path / "artifacts"
    with loopback_http_server() as server:
        monkeypatch.setenv("PHONE_HOME_URL", server.url_from_guest("/phone-home"))
        result = pytester.runpytest_subprocess(
            "-p", "no:cacheprovider", f"--adare-vm={test_image}",
            f"--adare-artifacts={artifacts}", "--adare-evidence=on-failure", "--adare-pcap",
            timeout=INNER_TIMEOUT,
        )  # fmt: skip
    result.assert_outcomes(passed=1, failed=1)
    assert server.requests == ["/phone-home"]
    result.stdout.fnmatch_lines(["*adare evidence bundle*", "*memory.elf*B  sha256 *"])
    passed = artifacts / sanitise_nodeid("test_scenario.py::test_passes_quietly")
    failed = artifacts / sanitise_nodeid("test_scenario.py::test_phones_home_then_fails")
    assert not (passed / "evidence").exists()
    assert verify_bundle(failed / "evidence") == []
    manifest = json.loads((failed / "evidence" / MANIFEST_FILE).read_text())
    assert manifest["test_id"] == "test_scenario.py::test_phones_home_then_fails"
    kinds = sorted(item["kind"] for item in manifest["files"])
    assert kinds == ["disk", "memory", "pcap"]
    for folder in (passed, failed):
        assert (folder / "network.pcap").is_file()
    home = [p for p in tcp_payloads(failed / "network.pcap") if b"GET /phone-home" in p.data]
    assert len(home) == 1
    assert not any(b"phone-home" in p.data for p in tcp_payloads(passed / "network.pcap"))


def test_marker_clock_makes_its_own_vm_and_bad_clocks_are_refused() -> None:
    options = AdareOptions(vm="debian")
    marked = apply_marker(options, pytest.mark.adare_vm(clock="2024-03-01T09:00:00Z").mark)
    assert marked.options.rtc_base == "2024-03-01T09:00:00"
    assert marked.vm_key != apply_marker(options, None).vm_key
    with pytest.raises(ValueError, match="clock must be an ISO 8601"):
        apply_marker(options, pytest.mark.adare_vm(clock="tomorrow").mark)
