"""The agent's fast command-line path answers exactly as argparse does, or defers to it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from adare_guest.cli import build_parser, parse_args, parse_simple_args

PLAIN = [
    [],
    ["/adare/run"],
    ["/adare/run", "--serial", "/dev/ttyS1"],
    ["--serial", "/dev/ttyS1", "/adare/run"],
    ["--port", "0", "--host", "127.0.0.1", "run"],
    ["run", "--log-file", "agent.log", "--log-level", "DEBUG", "--port", "18765"],
    [""],
    ["--host", ""],
]
FULL_PARSER_ONLY = [
    ["--port=1"],
    ["--ser", "/dev/ttyS1"],
    ["--port", "1", "--port", "2"],
    ["--port", "-1"],
    ["--port", "x"],
    ["--help"],
    ["--version"],
    ["a", "b"],
    ["--serial"],
    ["--", "run"],
    ["-h"],
]


@pytest.mark.parametrize("argv", PLAIN, ids=repr)
def test_plain_command_lines_parse_as_argparse_does(argv: list[str]) -> None:
    assert parse_simple_args(argv) == vars(build_parser().parse_args(argv))


@pytest.mark.parametrize("argv", FULL_PARSER_ONLY, ids=repr)
def test_other_command_lines_go_to_argparse(argv: list[str]) -> None:
    assert parse_simple_args(argv) is None


def test_parse_args_defers_to_argparse_for_the_rest() -> None:
    assert parse_args(["--port=7", "run"])["port"] == 7
    with pytest.raises(SystemExit):
        parse_args(["--port", "x"])


def test_the_service_command_line_does_not_import_argparse() -> None:
    script = (
        "import sys; from adare_guest.cli import parse_args;"
        "print(parse_args(['/adare/run', '--serial', '/dev/ttyS1'])['serial_device'],"
        " 'argparse' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-S", "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).resolve().parents[3],  # the repository root: adare_guest importable
    )
    assert done.stdout.split() == ["/dev/ttyS1", "False"], done.stderr
