"""What goes wrong when evidence is analysed: each names the tool (version) and the cause."""

from __future__ import annotations

from pytest_adare.errors import AdareError


class AnalysisUnavailable(AdareError):
    """The forensic library is not installed (the ``analysis`` extra)."""


class EvidenceUnreadable(AdareError):
    """The exported evidence cannot be opened: missing, unreadable, not a disk the tool knows."""


class ToolFailed(AdareError):
    """A tool (version) did not give records: it could not be installed, crashed, hung past
    its deadline or wrote what its parser cannot read. ``tool`` names it."""

    def __init__(self, tool: str, reason: str, output_tail: str = "") -> None:
        self.tool = tool
        self.reason = reason
        self.output_tail = output_tail
        tail = f"\n{output_tail}" if output_tail else ""
        super().__init__(f"{tool}: {reason}{tail}")
