"""The exceptions of pytest-adare (DESIGN §6).

``AdareError`` is the root. Infrastructure errors (the VM or the agent broke) are
kept apart from :class:`GuestCommandFailed`, which is the test's own assertion.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

_ESCAPES = {
    code: f"\\x{code:02x}" for code in (*range(0x20), *range(0x7F, 0xA0)) if chr(code) not in "\t\n"
}


def printable(text: str) -> str:
    r"""``text`` with every control character but tab and newline shown escaped.

    Guest-made text (console and agent log lines, messages that quote the guest)
    reaches terminals, report sections and logs through this: an ESC, BEL or NUL of a
    hostile guest must not set the terminal's title, clear it or write its clipboard
    (OSC 52). C1 controls (U+0080..U+009F) count too; nothing else changes, so
    applying it twice changes nothing more.

    >>> print(printable("title\x1b]0;pwned\x07 bell\x00"))
    title\x1b]0;pwned\x07 bell\x00
    """
    return text.translate(_ESCAPES)


def format_tail(lines: Sequence[str], title: str = "last console lines") -> str:
    """Render a console/log tail for an error message (control characters escaped)."""
    if not lines:
        return f"({title}: none)"
    body = "\n".join(f"  | {printable(line)}" for line in lines)
    return f"{title}:\n{body}"


class AdareError(Exception):
    """Root of every error raised by pytest-adare.

    Its text is :func:`printable`: messages often quote the guest (a tool's error, a
    command's output, console lines), and they end up on the developer's terminal.
    """

    def __str__(self) -> str:
        return printable(super().__str__())


class InfrastructureError(AdareError):
    """The VM, its hypervisor or its agent broke: the test could not run, which is not the
    test's own failure. The plugin reports these as errors, not failures, and replaces or
    fails fast the VM behind them; every such error derives from this class (a new one
    is classified by its base, not by a list kept elsewhere)."""


class VMLaunchError(InfrastructureError):
    """QEMU could not be started or died during start-up."""

    def __init__(self, message: str, *, exitcode: int | None, command: Sequence[str], output: str):
        self.exitcode = exitcode
        self.command = list(command)
        self.output = output
        super().__init__(
            f"{message} (exit code {exitcode})\ncommand: {' '.join(self.command)}\n"
            f"{format_tail(output.splitlines()[-20:], 'QEMU output')}"
        )


class VMTimeout(InfrastructureError):
    """A bounded wait ran out; says what was waited for, how long, what the guest was
    doing meanwhile (``report``: lines, e.g. the agent's health and log tail) and the
    console tail."""

    headline = "timed out after {seconds:.1f} s waiting for {what}"

    def __init__(
        self,
        what: str,
        seconds: float,
        console_tail: Sequence[str] = (),
        report: Sequence[str] = (),
    ):
        self.what = what
        self.seconds = seconds
        self.console_tail = list(console_tail)
        self.report = list(report)
        lines = [self.headline.format(seconds=seconds, what=what), *map(printable, self.report)]
        super().__init__("\n".join([*lines, format_tail(self.console_tail)]))


class AgentUnresponsive(VMTimeout):
    """A call got nothing from the agent, not even an answer to a ping, for ``seconds``:
    its message loop is stuck or the link lost the message. Raised before the call's own
    timeout; ``report`` says what the agent was doing."""

    headline = "the agent answered nothing, not even a ping, for {seconds:.0f} s while {what}"


class VMDied(InfrastructureError):
    """QEMU exited, or the guest shut down or panicked, while something waited on it."""

    def __init__(self, reason: str, console_tail: Sequence[str] = ()):
        self.reason = reason
        self.console_tail = list(console_tail)
        super().__init__(f"{reason}\n{format_tail(self.console_tail)}")


class ImageError(InfrastructureError):
    """An image (manifest, disk, build) is missing, invalid or could not be built."""


class QGAError(InfrastructureError):
    """The QEMU guest agent answered with an error or not at all."""


class SnapshotError(InfrastructureError):
    """``savevm``/``loadvm`` failed (QEMU's message says why)."""


class MigrationError(InfrastructureError):
    """Writing or loading a machine's whole state failed (QEMU's message says why)."""


class AgentUnreachable(InfrastructureError):
    """No connection to the agent; ``diagnosis`` says why in one sentence.

    ``console_tail`` holds the guest console's last lines when a VM was diagnosed.
    """

    def __init__(
        self,
        diagnosis: str,
        details: dict[str, Any] | None = None,
        console_tail: Sequence[str] = (),
    ):
        self.diagnosis = diagnosis
        self.details = details or {}
        self.console_tail = list(console_tail)
        super().__init__(diagnosis)


class AgentDisconnected(InfrastructureError):
    """The agent connection dropped while calls were pending."""


class ProtocolViolation(InfrastructureError):
    """The agent sent something that is not a valid protocol message."""


class ToolError(AdareError):
    """A tool call failed (protocol-level ``success=false`` or ``result.status == "error"``)."""

    def __init__(self, tool: str, message: str, result: dict[str, Any] | None = None):
        self.tool = tool
        self.message = message
        self.result = result
        super().__init__(f"{tool}: {message}")


class GuestCommandFailed(AdareError):
    """Raised by ``ShellResult.check()`` and ``guest.succeed()`` when a guest command
    exits non-zero; ``command``, ``returncode``, ``stdout``, ``stderr`` and the whole
    ``result`` say how."""

    def __init__(self, result: Any):
        self.result = result
        self.command: str = result.command
        self.returncode: int = result.returncode
        self.stdout: str = result.stdout
        self.stderr: str = result.stderr
        super().__init__(
            f"guest command {result.command!r} exited with {result.returncode}\n"
            f"stdout: {result.stdout[-2000:]!r}\nstderr: {result.stderr[-2000:]!r}"
        )


CommandFailed = GuestCommandFailed
"""``guest.succeed()``'s name for it (the NixOS driver's word)."""


class CommandSucceeded(AdareError, AssertionError):
    """Raised by ``guest.fail()`` when the command it expected to fail exited 0."""

    def __init__(self, result: Any):
        self.result = result
        super().__init__(
            f"guest command {result.command!r} was expected to fail but exited 0\n"
            f"stdout: {result.stdout[-2000:]!r}\nstderr: {result.stderr[-2000:]!r}"
        )


class GuestWaitTimeout(AdareError, TimeoutError):
    """A wait on the guest (a command, a file, a port, a unit, a window) ran out.

    ``what`` says what was waited for, ``attempts`` how often it was checked and
    ``last`` what the last check saw (exit code and output tail, the listening ports,
    the window titles).
    """

    def __init__(self, what: str, seconds: float, attempts: int, last: str):
        self.what = what
        self.seconds = seconds
        self.attempts = attempts
        self.last = last
        super().__init__(
            f"timed out after {seconds:.1f} s waiting for {what} ({attempts} checks); "
            f"last check: {last}"
        )


def console_tail_of(error: BaseException) -> list[str]:
    """The guest console lines an error carries (VMTimeout, VMDied, AgentUnreachable)."""
    tail = getattr(error, "console_tail", None)
    return [str(line) for line in tail] if isinstance(tail, list) else []
