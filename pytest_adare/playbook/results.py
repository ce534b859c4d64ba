"""What a playbook run did: one record per action and per test verdict, as report lines
and as the machine-readable ``playbook-results.json``."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

RESULTS_NAME = "playbook-results.json"
MAX_MESSAGE = 300


@dataclass
class ActionRecord:
    """One action as it ran: ``result`` is ok, failed, skipped, stopped or continued."""

    kind: str
    description: str
    line: int
    started: float
    seconds: float
    result: str
    message: str = ""
    depth: int = 0

    def line_text(self) -> str:
        indent = "  " * self.depth
        text = f"{indent}{self.kind:<20} {self.seconds:7.2f}s  {self.result:<9} {self.description}"
        return f"{text}  ({self.message})" if self.message else text


@dataclass
class Verdict:
    """One ``test`` step's verdict: the guest's status, and whether that is what was
    expected (``expect_to_fail`` turns a FAILED into the expected outcome)."""

    name: str
    function: str
    status: str
    passed: bool
    expect_to_fail: bool
    details: list[str]
    seconds: float
    line: int


@dataclass
class PlaybookResult:
    """A whole run: every action, every verdict, how it ended."""

    experiment: str
    environment: str | None
    actions: list[ActionRecord] = field(default_factory=list)
    verdicts: list[Verdict] = field(default_factory=list)
    stopped_by: str | None = None
    error: str | None = None
    completed: bool = False
    seconds: float = 0.0
    variables: dict[str, Any] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        """Ran to its end (or a ``stop``) with no error and every verdict as expected."""
        return self.completed and self.error is None and all(v.passed for v in self.verdicts)

    def failed_verdicts(self) -> list[Verdict]:
        return [v for v in self.verdicts if not v.passed]

    def report(self) -> str:
        """The item's report section: one line per action, then how it ended."""
        lines = [record.line_text() for record in self.actions]
        if self.stopped_by is not None:
            lines.append(f"stopped by a stop action: {self.stopped_by}")
        if self.error is not None:
            lines.append(f"error: {self.error}")
        good = sum(v.passed for v in self.verdicts)
        lines.append(
            f"{len(self.actions)} actions, {good} of {len(self.verdicts)} verdicts as expected, "
            f"{self.seconds:.1f}s"
        )
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {
            "experiment": self.experiment,
            "environment": self.environment,
            "passed": self.passed,
            "completed": self.completed,
            "stopped_by": self.stopped_by,
            "error": self.error,
            "seconds": round(self.seconds, 3),
            "actions": [asdict(a) for a in self.actions],
            "tests": [asdict(v) for v in self.verdicts],
            "variables": {k: _jsonable(v) for k, v in self.variables.items()},
        }

    def write(self, directory: Path) -> Path:
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / RESULTS_NAME
        path.write_text(json.dumps(self.to_json(), indent=2, default=str) + "\n")
        return path


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)[:MAX_MESSAGE]
    return value


def clip(text: str) -> str:
    one = " ".join(str(text).split())
    return one if len(one) <= MAX_MESSAGE else one[: MAX_MESSAGE - 3] + "..."
