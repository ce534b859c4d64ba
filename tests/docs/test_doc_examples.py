"""Every code example of README.md and docs/ runs as written, or says why it cannot here.

How each kind of block runs is in doc_examples.py; the test blocks of one image share
one ``pytest --adare-vm=IMAGE`` session (doc_sessions.py).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from doc_examples import DocBlock, all_blocks, claims_as_asserts, pytest_commands
from doc_sessions import CaseResult, ExampleSessions, session_args, user_env

BLOCKS = all_blocks()
COMMAND_TIMEOUT = 600.0


def _shown(block: DocBlock) -> str:
    return f"{block.id} ({block.kind}):\n{block.source}"


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, env=user_env(), capture_output=True, text=True,
                          timeout=COMMAND_TIMEOUT, stdin=subprocess.DEVNULL)


def _check_session_cases(block: DocBlock, sessions: ExampleSessions) -> None:
    cases = sessions.results_of(block)
    session = sessions.session_of(block)
    assert cases, (f"{_shown(block)}\nran no test in the {session.image} session:\n"
                   f"{session.output_tail()}")
    if block.shown_failure is not None:
        _check_fails_as_shown(block, cases)
        return
    bad = [c for c in cases if c.outcome != "passed"]
    assert not bad, f"{_shown(block)}\n" + "\n\n".join(
        f"{c.name}: {c.outcome}\n{c.text}" for c in bad)


def _check_fails_as_shown(block: DocBlock, cases: list[CaseResult]) -> None:
    failed = [c for c in cases if c.outcome == "failed"]
    assert failed, f"{_shown(block)}\nshould fail as the doc shows, but: {cases}"
    report = {line.rstrip() for line in failed[0].text.splitlines()}
    assert block.shown_failure is not None
    missing = [line for line in block.shown_failure.splitlines()
               if line.strip() != "..." and line.rstrip() not in report]
    assert not missing, (f"{_shown(block)}\nthe report lacks these lines the doc shows:\n"
                         + "\n".join(missing) + f"\n\nthe report:\n{failed[0].text}")


def run_pytest_command(block: DocBlock, sessions: ExampleSessions) -> None:
    """``pytest --adare-vm=debian`` is the command the example session runs: check that
    it is, and that the doc's own test blocks passed in it."""
    for args in pytest_commands(block.source) or []:
        images = [image for image in sessions.sessions if session_args(image) == args]
        assert images, (f"{_shown(block)}\nnot a command the example sessions run "
                        f"({[session_args(i) for i in sessions.sessions]})")
        session = sessions.sessions[images[0]]
        tests = [b for b in session.tests if b.doc == block.doc]
        assert tests, f"{_shown(block)}\nthe doc shows no test for this command to run"
        for test in tests:
            _check_session_cases(test, sessions)


def run_script(block: DocBlock, tmp_path: Path) -> None:
    script = tmp_path / "example.py"
    script.write_text(claims_as_asserts(block.setup + block.source))
    result = _run([sys.executable, str(script)], tmp_path)
    assert result.returncode == 0, (f"{_shown(block)}\nexit {result.returncode}\n"
                                    f"{result.stdout}\n{result.stderr}")


def _as_root(command: str) -> str:
    # The machine's user is root: `sudo X` is X (sudo itself may not be installed).
    if os.geteuid() == 0:
        return re.sub(r"^sudo\s+", "", command)
    return command


def _shape(example: str) -> re.Pattern[str]:
    """A pattern for output shown as "e.g. debian-0a6554284d4c2884": hex runs vary."""
    parts = re.split(r"([0-9a-f]{6,})", example)
    return re.compile("".join(f"[0-9a-f]{{{len(p)}}}" if i % 2 else re.escape(p)
                              for i, p in enumerate(parts)))


def run_shell(block: DocBlock, tmp_path: Path) -> None:
    script = tmp_path / "example.sh"
    script.write_text("set -euo pipefail\n" + "\n".join(
        _as_root(line) for line in block.source.splitlines()) + "\n")
    result = _run(["bash", str(script)], tmp_path)
    assert result.returncode == 0, (f"{_shown(block)}\nexit {result.returncode}\n"
                                    f"{result.stdout}\n{result.stderr}")
    shown = re.search(r"#\s*e\.g\.\s*(\S+)\s*$", block.source.rstrip())
    if shown:
        printed = result.stdout.strip().splitlines()[-1:]
        assert printed and _shape(shown.group(1)).fullmatch(printed[0]), (
            f"{_shown(block)}\nprinted {printed}, the doc shows the form {shown.group(1)!r}")


def run_console(block: DocBlock, tmp_path: Path) -> None:
    """``$ command`` lines run in turn; the lines after one are its output, when shown."""
    steps: list[tuple[str, list[str]]] = []
    for line in block.source.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        elif steps:
            steps[-1][1].append(line)
    assert steps, f"{_shown(block)}\nno `$ command` line"
    for command, shown in steps:
        result = _run(["bash", "-c", _as_root(command)], tmp_path)
        assert result.returncode == 0, (f"{block.id}: `{command}` exited {result.returncode}\n"
                                        f"{result.stdout}\n{result.stderr}")
        expected = "\n".join(shown).strip()
        if expected:
            assert result.stdout.strip() == expected, f"{block.id}: `{command}` printed"


@pytest.mark.e2e
@pytest.mark.parametrize("block", BLOCKS, ids=[b.id for b in BLOCKS])
def test_doc_example(block: DocBlock, example_sessions: ExampleSessions,
                     tmp_path: Path) -> None:
    if block.skip_reason is not None:
        pytest.skip(block.skip_reason)
    kind = block.kind
    if kind in ("test", "guest-fragment"):
        _check_session_cases(block, example_sessions)
    elif kind == "file":
        compile(block.source, block.project_path, "exec")  # run by the tests that use it
    elif kind == "pytest-command":
        run_pytest_command(block, example_sessions)
    elif kind == "script":
        run_script(block, tmp_path)
    elif kind == "shell":
        run_shell(block, tmp_path)
    elif kind == "console":
        run_console(block, tmp_path)
    else:
        json.loads(block.source)
