"""adarelib's ``StatusEnum`` (same member values) and ``TIMESTAMP_FORMAT``."""

from __future__ import annotations

import enum

from adare_guest.testfunctions import TestStatus

TIMESTAMP_FORMAT = "%Y-%m-%dT%H:%M:%S.%f"


class StatusEnum(enum.IntEnum):
    """adare's status numbers; :meth:`to_test_status` maps a verdict to ours."""

    NONE = 1
    SUCCESS = 2
    FAILED = 3
    WARNING = 4
    ERROR = 5
    RUNNING = 6
    PENDING = 7
    INTERRUPTED = 8
    FINISHED = 9
    TEST_MISSING = 12
    TEST_FAILED = 13
    PAUSE = 14

    @staticmethod
    def from_string(status: str) -> StatusEnum:
        """``"success"`` (any case, spaces trimmed) → ``SUCCESS``; unknown → ``NONE``."""
        try:
            return StatusEnum[status.strip().upper()]
        except KeyError:
            return StatusEnum.NONE

    def to_test_status(self) -> TestStatus:
        """The wire verdict: SUCCESS, FAILED, WARNING, ERROR, anything else UNKNOWN."""
        try:
            return TestStatus(self.name)
        except ValueError:
            return TestStatus.UNKNOWN
