"""A tool's records scored against what the scenario did: found, mismatched, missed.

Pure: expectations and plain records (:mod:`.records`) in, a :class:`Score` out. An
expectation is found only by a record whose identifying fields are equal *and* whose
compared fields agree within the tolerance; a record without a compared field is a
mismatch naming the field, never a find. Every record of a kind the truth speaks about
that no expectation identifies is *unexplained* (the tool's false positives, or what the
scenario did not say).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pytest_adare.analysis.records import JSONValue, PlainRecord, parse_time, plain_value

Verdict = Literal["found", "mismatched", "missed", "tool failed"]


@dataclass(frozen=True)
class Expectation:
    """One thing the tool should report: a record of ``kind`` whose ``identify`` fields
    equal these values and whose ``compare`` fields agree (times and numbers within
    ``tolerance`` seconds or units)."""

    kind: str
    identify: Mapping[str, Any]
    compare: Mapping[str, Any] = field(default_factory=dict)
    tolerance: float = 0.0
    origin: str = "the test"

    def __post_init__(self) -> None:
        if not self.identify:
            raise ValueError(
                f"expectation of {self.kind!r}: no field identifies the record "
                "(give at least one that is not compared)"
            )
        if self.tolerance < 0:
            raise ValueError(f"expectation of {self.kind!r}: tolerance must be >= 0")

    def describe(self) -> str:
        """``trash path=/home/user/Documents/report.txt``"""
        return " ".join([self.kind, *(f"{k}={plain_value(v)}" for k, v in self.identify.items())])

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "identify": {k: plain_value(v) for k, v in self.identify.items()},
            "compare": {k: plain_value(v) for k, v in self.compare.items()},
            "tolerance": self.tolerance,
            "origin": self.origin,
        }


@dataclass(frozen=True)
class FieldDiff:
    """A compared field the record got wrong: what was expected, what the tool said."""

    field: str
    expected: JSONValue
    got: JSONValue
    reason: str


@dataclass(frozen=True)
class Outcome:
    """One expectation's verdict, with the record that decided it (None when missed)."""

    expectation: Expectation
    verdict: Verdict
    record: PlainRecord | None = None
    diffs: tuple[FieldDiff, ...] = ()
    reason: str = ""

    def tool_value(self) -> str:
        """The report's "tool's value" cell: the compared fields as the tool gave them."""
        if self.verdict == "tool failed":
            return self.reason
        if self.record is None:
            return "(no record)"
        names = list(self.expectation.compare) or list(self.expectation.identify)
        return ", ".join(f"{n}={self.record.get(n, '(absent)')}" for n in names)

    def to_json(self) -> dict[str, Any]:
        return {
            "expectation": self.expectation.to_json(),
            "verdict": self.verdict,
            "record": self.record,
            "diffs": [vars(d) for d in self.diffs],
            "reason": self.reason,
        }


@dataclass(frozen=True)
class Unexplained:
    """A record the truth does not explain."""

    kind: str
    record: PlainRecord


@dataclass(frozen=True)
class Score:
    """One tool (version)'s verdicts: one :class:`Outcome` per expectation, in order."""

    tool: str
    outcomes: tuple[Outcome, ...]
    unexplained: tuple[Unexplained, ...] = ()
    failure: str | None = None

    def _with(self, verdict: Verdict) -> list[Outcome]:
        return [o for o in self.outcomes if o.verdict == verdict]

    @property
    def found(self) -> list[Outcome]:
        return self._with("found")

    @property
    def missed(self) -> list[Outcome]:
        return self._with("missed")

    @property
    def mismatched(self) -> list[Outcome]:
        return self._with("mismatched")

    def counts(self) -> dict[str, int]:
        """``found``, ``mismatched``, ``missed``, ``tool failed``, ``unexplained``."""
        verdicts: tuple[Verdict, ...] = ("found", "mismatched", "missed", "tool failed")
        counts: dict[str, int] = {v: len(self._with(v)) for v in verdicts}
        counts["unexplained"] = len(self.unexplained)
        return counts

    def to_json(self) -> dict[str, Any]:
        return {
            "tool": self.tool,
            "failure": self.failure,
            "counts": self.counts(),
            "outcomes": [o.to_json() for o in self.outcomes],
            "unexplained": [{"kind": u.kind, "record": u.record} for u in self.unexplained],
        }


def score(
    tool: str, expectations: Iterable[Expectation], found: Mapping[str, Iterable[PlainRecord]]
) -> Score:
    """Each expectation against the tool's records of its kind."""
    by_kind = {kind: list(records) for kind, records in found.items()}
    explained: set[tuple[str, int]] = set()
    outcomes: list[Outcome] = []
    for expectation in expectations:
        records = by_kind.get(expectation.kind, [])
        candidates = [(i, r) for i, r in enumerate(records) if _identifies(expectation, r)]
        explained.update((expectation.kind, i) for i, _ in candidates)
        outcomes.append(_judge(expectation, [r for _, r in candidates]))
    spoken_of = {o.expectation.kind for o in outcomes}
    unexplained = tuple(
        Unexplained(kind, record)
        for kind in sorted(spoken_of & set(by_kind))
        for i, record in enumerate(by_kind[kind])
        if (kind, i) not in explained
    )
    return Score(tool, tuple(outcomes), unexplained)


def tool_failed(tool: str, expectations: Iterable[Expectation], reason: str) -> Score:
    """The score of a tool that did not run to the end: every expectation "tool failed"."""
    outcomes = tuple(Outcome(e, "tool failed", reason=reason) for e in expectations)
    return Score(tool, outcomes, failure=reason)


def _identifies(expectation: Expectation, record: PlainRecord) -> bool:
    return all(
        name in record and record[name] == plain_value(value)
        for name, value in expectation.identify.items()
    )


def _judge(expectation: Expectation, candidates: list[PlainRecord]) -> Outcome:
    if not candidates:
        return Outcome(expectation, "missed")
    judged = [(record, _diffs(expectation, record)) for record in candidates]
    record, diffs = min(judged, key=lambda pair: len(pair[1]))  # the first best, stable
    return Outcome(expectation, "mismatched" if diffs else "found", record, tuple(diffs))


def _diffs(expectation: Expectation, record: PlainRecord) -> list[FieldDiff]:
    diffs = []
    for name, expected in expectation.compare.items():
        wanted = plain_value(expected)
        if name not in record:
            diffs.append(FieldDiff(name, wanted, None, f"the record has no field {name!r}"))
            continue
        reason = _disagreement(expected, record[name], expectation.tolerance)
        if reason:
            diffs.append(FieldDiff(name, wanted, record[name], reason))
    return diffs


def _disagreement(expected: Any, got: JSONValue, tolerance: float) -> str:
    """Why ``got`` is not ``expected`` (empty when it is, within ``tolerance``)."""
    if isinstance(expected, dt.datetime):
        when = parse_time(got)
        if when is None:
            return f"{got!r} is not a timestamp"
        wanted = parse_time(expected)
        assert wanted is not None  # a datetime always parses
        off = abs((when - wanted).total_seconds())
        return f"off by {off:.3f} s (tolerance {tolerance:g} s)" if off > tolerance else ""
    if isinstance(expected, (int, float)) and not isinstance(expected, bool):
        if isinstance(got, bool) or not isinstance(got, (int, float)):
            return f"{got!r} is not a number"
        off = abs(got - expected)
        return f"off by {off:g} (tolerance {tolerance:g})" if off > tolerance else ""
    return "" if got == plain_value(expected) else "not equal"
