"""The ``ground_truth`` fixture's object: expectations, and the analysis step run over the
evidence once per tool version (or once in-process), each run scored.

The scenario runs once; :meth:`ToolValidation.validate` runs the tools N times over the
*same* export. A version that cannot be installed, crashes or hangs is a "tool failed"
score naming it; the others still run. :meth:`ToolValidation.score` scores records a
test got itself (a command-line tool's, :func:`~pytest_adare.analysis.tool_run.run_tool`)
and keeps them beside the step's runs, so the test's report and bundle hold every tool.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_adare.analysis.errors import EvidenceUnreadable, ToolFailed
from pytest_adare.analysis.ground_truth import GroundTruth
from pytest_adare.analysis.score import Score, score, tool_failed
from pytest_adare.analysis.step import (
    STEP_TIMEOUT,
    AnalysisStep,
    StepFunction,
    StepRun,
    run_in_environment,
    run_in_process,
)
from pytest_adare.analysis.tool_envs import ToolSpec, tool_python

IN_PROCESS = "installed"
"""The tool label of a run without ``--adare-tool``: the version installed beside pytest."""


@dataclass(frozen=True)
class Validation:
    """One tool version's run of a step (or a test's own tool run) and its score; runs of
    one :meth:`ToolValidation.validate` call share ``group``, their versions compared."""

    run: StepRun
    score: Score
    group: int = 0


class ToolValidation(GroundTruth):
    """A :class:`GroundTruth` that also runs the analysis step over the evidence."""

    def __init__(
        self, tools: Sequence[str] = (), *, env_root: Path | None = None,
        timeout: float = STEP_TIMEOUT,
    ) -> None:  # fmt: skip
        super().__init__()
        self.tools = tuple(ToolSpec.parse(t) for t in tools)
        self.env_root = env_root
        self.timeout = timeout
        self.validations: list[Validation] = []
        self._groups = itertools.count()

    def validate(
        self, step: StepFunction | str, evidence: str | os.PathLike[str]
    ) -> dict[str, Score]:
        """Run ``step`` over ``evidence`` per tool version, score each: label → score.

        :raise EvidenceUnreadable: no readable file at ``evidence`` (before any tool runs).
        """
        disk = Path(evidence).resolve()
        if not disk.is_file() or not os.access(disk, os.R_OK):
            raise EvidenceUnreadable(f"no readable evidence at {disk}")
        runs = [self._run_here(step, disk)] if not self.tools else [
            self._run_in(spec, AnalysisStep.of(step), disk) for spec in self.tools
        ]  # fmt: skip
        scores = {}
        group = next(self._groups)
        for run in runs:
            judged = (
                score(run.tool, self.expectations, run.records)
                if run.records is not None
                else tool_failed(run.tool, self.expectations, run.failure or "no records")
            )
            self.validations.append(Validation(run, judged, group))
            scores[run.tool] = judged
        return scores

    def score(
        self, records: Mapping[str, Iterable[Any]] | Iterable[Any], *, kind: str | None = None,
        tool: str = "tool",
    ) -> Score:  # fmt: skip
        """:meth:`GroundTruth.score`, kept in the test's report and bundle as ``tool``'s."""
        found = self._plain(records, kind)
        judged = self._judge(found, tool)
        self.validations.append(Validation(StepRun(tool, found), judged, next(self._groups)))
        return judged

    def _run_here(self, step: StepFunction | str, disk: Path) -> StepRun:
        function = AnalysisStep.of(step).load() if isinstance(step, str) else step
        started = time.monotonic()
        try:
            records = run_in_process(function, disk)
        except ToolFailed as error:
            return StepRun(IN_PROCESS, None, error.reason)
        return StepRun(IN_PROCESS, records, seconds=time.monotonic() - started)

    def _run_in(self, spec: ToolSpec, step: AnalysisStep, disk: Path) -> StepRun:
        try:
            python = tool_python(spec, self.env_root)
            return run_in_environment(step, python, disk, spec.text, spec.names, self.timeout)
        except ToolFailed as error:  # the reason without the tool's output tail: a table cell
            return StepRun(spec.text, None, f"{error.tool}: {error.reason}")
