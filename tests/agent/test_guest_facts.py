"""``adare_guest/guest_facts.py``, run the way the host runs it (``python3 -c <source>``)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import fields
from pathlib import Path

import pytest

from pytest_adare.agent.diagnosis import FACTS_SCRIPT, AgentFacts
from pytest_adare.agent.install import FIREWALL_SCRIPT

FAKE_AGENT = "import time; time.sleep(60)"
AGENT_WORD = "adare" + "_guest"


@pytest.fixture
def settled_agent() -> Iterator[int]:
    """A Python process whose command line looks like the agent's, older than 2 s."""
    proc = subprocess.Popen([sys.executable, "-c", FAKE_AGENT, AGENT_WORD])
    try:
        time.sleep(2.2)
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


def run_facts(*args: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", FACTS_SCRIPT, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    found: dict[str, object] = json.loads(done.stdout)
    return found


def test_the_facts_script_is_the_module_source_run_like_the_firewall_script() -> None:
    source = Path(__file__).resolve().parents[2] / "adare_guest" / "guest_facts.py"
    assert FACTS_SCRIPT == source.read_text("utf-8")
    assert FIREWALL_SCRIPT.startswith('"""')  # the same kind of file: a module's source
    # Its own command line (the source) must never look like a running agent.
    assert AGENT_WORD not in FACTS_SCRIPT and "bundle" + ".pyz" not in FACTS_SCRIPT


def test_the_facts_name_every_agent_fact_and_find_a_settled_agent(
    settled_agent: int, tmp_path: Path
) -> None:
    empty, written = tmp_path / "stderr.log", tmp_path / "agent.log"
    empty.write_text("")
    written.write_text("".join(f"line {n}\n" for n in range(30)))
    found = run_facts("18765", str(empty), str(written))
    collected = {f.name for f in fields(AgentFacts)} - {
        "port", "connect_errors", "serial_health", "serial_error", "qga_error"
    }  # fmt: skip
    assert set(found) == collected
    assert settled_agent in found["agent_pids"]  # type: ignore[operator]
    assert found["log_path"] == str(written)
    assert found["log_tail"] == [f"line {n}" for n in range(10, 30)]


def test_a_bad_port_argument_is_refused() -> None:
    done = subprocess.run(
        [sys.executable, "-c", FACTS_SCRIPT, "port"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2 and "usage" in done.stderr
