"""Run a command-line forensic tool over exported evidence and parse what it prints.

::

    found = run_tool(["fls", "-r", "-p", "{disk}"], evidence=disk, parser=parse_fls, kind="file")

The command runs in a process group of its own with its output in a file (bounded);
past its deadline the group is killed. A tool that is missing, exits non-zero, runs out
of time, prints too much or prints what its parser cannot read raises
:class:`~pytest_adare.analysis.errors.ToolFailed` naming it: nothing is scored as found.
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pytest_adare.analysis.errors import EvidenceUnreadable, ToolFailed
from pytest_adare.analysis.records import ToolRecords, plain_records

TOOL_TIMEOUT = 600.0
MAX_OUTPUT = 256 << 20
TAIL_BYTES = 2000

Evidence = str | os.PathLike[str] | Mapping[str, str | os.PathLike[str]]


def evidence_paths(evidence: Evidence) -> dict[str, Path]:
    """The placeholders a command may use: a single path is ``{disk}``.

    :raise EvidenceUnreadable: a path with no readable file.
    """
    named = evidence if isinstance(evidence, Mapping) else {"disk": evidence}
    paths = {name: Path(path) for name, path in named.items()}
    for name, path in paths.items():
        if not path.is_file() or not os.access(path, os.R_OK):
            raise EvidenceUnreadable(f"evidence {{{name}}}: no readable file at {path}")
    return paths


def command_argv(argv: Sequence[str], paths: Mapping[str, Path]) -> list[str]:
    """``argv`` with ``{name}`` replaced by the evidence's paths.

    :raise ValueError: a placeholder that names no evidence.
    """
    values = {name: str(path) for name, path in paths.items()}
    try:
        return [part.format_map(values) for part in argv]
    except KeyError as error:
        raise ValueError(
            f"{argv[0]}: {{{error.args[0]}}} names no evidence (given: {sorted(values)})"
        ) from None


def run_tool(
    argv: Sequence[str], *, evidence: Evidence, parser: Callable[[str], Iterable[Any]],
    kind: str, timeout: float = TOOL_TIMEOUT, max_output: int = MAX_OUTPUT,
) -> ToolRecords:  # fmt: skip
    """``argv`` over ``evidence``; ``parser(stdout)`` gives the records of ``kind``.

    :raise EvidenceUnreadable: an evidence file is missing or unreadable.
    :raise ValueError: an empty ``argv`` or a placeholder naming no evidence.
    :raise ToolFailed: the tool is missing, fails, hangs, floods or is unparseable.
    """
    if not argv:
        raise ValueError("run_tool: argv is empty")
    command = command_argv(argv, evidence_paths(evidence))
    tool = command[0]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        try:
            process = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                start_new_session=True,
            )  # fmt: skip
        except OSError as error:
            raise ToolFailed(tool, f"cannot start it: {error.strerror or error}") from None
        try:
            status = process.wait(timeout)
        except subprocess.TimeoutExpired:
            _kill_group(process)
            raise ToolFailed(tool, f"no answer within {timeout:g} s (killed)", _tail(err)) from None
        if status != 0:
            raise ToolFailed(tool, f"exit status {status}", _tail(err))
        size = out.seek(0, os.SEEK_END)
        if size > max_output:
            raise ToolFailed(tool, f"printed {size} bytes, more than the {max_output} allowed")
        out.seek(0)
        text = out.read().decode("utf-8", errors="surrogateescape")
    try:
        return plain_records({kind: parser(text)})
    except ValueError as error:
        raise ToolFailed(tool, f"its output could not be parsed: {error}") from None


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


def _tail(stream: Any) -> str:
    size = stream.seek(0, os.SEEK_END)
    stream.seek(max(0, size - TAIL_BYTES))
    return str(stream.read().decode("utf-8", errors="replace").strip())
