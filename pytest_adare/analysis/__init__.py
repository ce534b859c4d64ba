"""Forensic tool validation: open exported evidence with a tool, say what it should find,
score what it found, across tool versions (docs/tool-validation.md).

Nothing here imports the tool before it is used: Dissect (the ``analysis`` extra) is
imported by :func:`open_target`; every module runs also in a tool version's environment,
which holds only the tool and this package.
"""

from pytest_adare.analysis.errors import AnalysisUnavailable, EvidenceUnreadable, ToolFailed
from pytest_adare.analysis.fls import parse_fls
from pytest_adare.analysis.ground_truth import GroundTruth
from pytest_adare.analysis.records import plain_record
from pytest_adare.analysis.score import Expectation, Outcome, Score
from pytest_adare.analysis.target import open_target
from pytest_adare.analysis.tool_run import run_tool

__all__ = [
    "AnalysisUnavailable",
    "EvidenceUnreadable",
    "Expectation",
    "GroundTruth",
    "Outcome",
    "Score",
    "ToolFailed",
    "open_target",
    "parse_fls",
    "plain_record",
    "run_tool",
]
