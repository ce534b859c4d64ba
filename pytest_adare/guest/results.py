"""What the guest's commands and test functions return: :class:`ShellResult` (read from
an untrusted ``execute_shell`` result) and :class:`TestOutcome`."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from adare_guest.tool_names import EXECUTE_SHELL
from pytest_adare.errors import GuestCommandFailed, ToolError


@dataclass(frozen=True)
class ShellResult:
    """What ``guest.shell()`` returns; ``.check()`` raises when ``returncode != 0``.

    ``stdout``/``stderr`` are text (output that is not UTF-8 is shown with replacement
    characters); ``stdout_raw``/``stderr_raw`` are the bytes exactly as the command
    wrote them (the agent carries non-UTF-8 output as base64, losslessly). The agent
    keeps at most ``max_output_bytes`` of each stream: ``stdout_truncated`` says the
    rest was dropped and ``stdout_total`` counts every byte the command wrote.
    """

    returncode: int
    stdout: str
    stderr: str
    command: str
    stdout_raw: bytes = b""
    stderr_raw: bytes = b""
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    stdout_total: int = -1
    stderr_total: int = -1
    pid: int | None = None
    """``shell(..., background=True)``: the started program's pid (it runs on; returncode 0
    says only that it started), with its output in ``stdout_path`` and ``stderr_path``."""
    stdout_path: str | None = None
    stderr_path: str | None = None

    def __post_init__(self) -> None:
        # Built by hand from text only: the bytes and counts follow from the text.
        for name in ("stdout", "stderr"):
            text: str = getattr(self, name)
            if not getattr(self, f"{name}_raw") and text:
                object.__setattr__(self, f"{name}_raw", text.encode("utf-8", "surrogatepass"))
            if getattr(self, f"{name}_total") < 0:
                object.__setattr__(self, f"{name}_total", len(getattr(self, f"{name}_raw")))

    @classmethod
    def from_result(cls, command: str, result: Mapping[str, Any]) -> ShellResult:
        """Read an ``execute_shell`` result; the guest is not trusted to send one.

        :raise ToolError: no integer ``returncode`` (the command did not run to its end:
            the agent's message says why), or a field of the wrong type or an
            inconsistent one (invalid base64, a count below the bytes sent).
        """
        pid = result.get("pid")
        if "stdout_path" in result and result.get("returncode") is None:
            if type(pid) is not int or pid <= 0:
                raise ToolError(EXECUTE_SHELL, f"{command!r}: no pid", dict(result))
            paths = [result.get(f"{name}_path") for name in ("stdout", "stderr")]
            if not all(isinstance(path, str) for path in paths):
                raise ToolError(EXECUTE_SHELL, f"{command!r}: no output paths", dict(result))
            return cls(0, "", "", command, pid=pid, stdout_path=paths[0], stderr_path=paths[1])
        returncode = result.get("returncode")
        if type(returncode) is not int:
            message = result.get("message", "no return code")
            raise ToolError(EXECUTE_SHELL, f"{command!r}: {message}", dict(result))
        out = _stream(command, result, "stdout")
        err = _stream(command, result, "stderr")
        return cls(returncode, out[0], err[0], command, out[1], err[1], out[2], err[2],
                   out[3], err[3])  # fmt: skip

    def check(self) -> ShellResult:
        """Return self when the command succeeded, else raise :class:`GuestCommandFailed`."""
        if self.returncode != 0:
            raise GuestCommandFailed(self)
        return self

    @property
    def ok(self) -> bool:
        """True when the command exited 0."""
        return self.returncode == 0

    @property
    def truncated(self) -> bool:
        """True when the agent dropped output of either stream (above ``max_output_bytes``)."""
        return self.stdout_truncated or self.stderr_truncated


def _stream(command: str, result: Mapping[str, Any], name: str) -> tuple[str, bytes, bool, int]:
    """(text, raw bytes, truncated, total bytes) of one output stream of a shell result."""

    def malformed(why: str) -> ToolError:
        return ToolError(EXECUTE_SHELL, f"{command!r}: malformed result: {why}", dict(result))

    text, encoded = result.get(name, ""), result.get(f"{name}_base64")
    truncated, total = result.get(f"{name}_truncated", False), result.get(f"{name}_bytes")
    if not isinstance(text, str):
        raise malformed(f"{name} is {type(text).__name__}, not text")
    if type(truncated) is not bool:
        raise malformed(f"{name}_truncated is {type(truncated).__name__}, not a boolean")
    if encoded is None:
        raw = text.encode("utf-8", "surrogatepass")
    else:
        if not isinstance(encoded, str) or text:
            raise malformed(f"{name}_base64 must be base64 text with {name} empty")
        try:
            raw = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            raise malformed(f"{name}_base64 is not valid base64") from None
        text = raw.decode("utf-8", "replace")
    if total is None:
        total = len(raw)
    if type(total) is not int or total < len(raw):
        raise malformed(f"{name}_bytes={total!r} does not count the {len(raw)} bytes sent")
    return text, raw, truncated, total


@dataclass(frozen=True)
class TestOutcome:
    """The verdict of a guest test function: status SUCCESS|FAILED|ERROR|WARNING|UNKNOWN."""

    __test__ = False  # not a pytest test class

    status: str
    details: list[str]

    @property
    def passed(self) -> bool:
        """True when the status is SUCCESS."""
        return self.status == "SUCCESS"
