"""adarelib's ``TestResult``: what adare test functions may return."""

from __future__ import annotations

import traceback
from dataclasses import dataclass, field
from typing import Any

from adare_guest.adarelib_compat.constants import StatusEnum
from adare_guest.testfunctions import TestResult as NativeResult
from adare_guest.testfunctions import TestStatus

__all__ = ["StatusEnum", "TestResult"]


@dataclass
class TestResult:
    """``TestResult(status=StatusEnum.X, details=[...])`` and its adare constructors.

    The agent turns it into its own verdict with :meth:`as_test_result`
    (``status`` may also be one of our ``TestStatus`` values or a status name).
    """

    __test__ = False

    status: StatusEnum | TestStatus | str
    details: list[Any] = field(default_factory=list)

    @classmethod
    def success(cls, details: list[Any] | None = None) -> TestResult:
        """The check held."""
        return cls(StatusEnum.SUCCESS, list(details or []))

    @classmethod
    def failed(cls, details: list[Any] | None = None) -> TestResult:
        """The check ran and did not hold."""
        return cls(StatusEnum.FAILED, list(details or []))

    @classmethod
    def error(cls, details: list[Any] | None = None) -> TestResult:
        """The check could not be made."""
        return cls(StatusEnum.ERROR, list(details or []))

    @classmethod
    def execution_error(
        cls, exception: BaseException | None, context: str | None = None
    ) -> TestResult:
        """ERROR from an exception: ``"context - Type: message"``, then the stack trace."""
        if exception is None:
            return cls(StatusEnum.ERROR, [context or "Unknown error"])
        message = f"{type(exception).__name__}: {exception}"
        if context:
            message = f"{context} - {message}"
        trace = "".join(
            traceback.format_exception(type(exception), exception, exception.__traceback__)
        )
        return cls(StatusEnum.ERROR, [message, f"Stack trace:\n{trace}"])

    def as_test_result(self) -> NativeResult:
        """Our verdict; an unrecognised status becomes UNKNOWN."""
        status = self.status
        if isinstance(status, StatusEnum):
            verdict = status.to_test_status()
        elif isinstance(status, TestStatus):
            verdict = status
        else:
            verdict = StatusEnum.from_string(str(status)).to_test_status()
        details = self.details if isinstance(self.details, list) else [self.details]
        return NativeResult(verdict, [d if isinstance(d, str) else str(d) for d in details])
