"""What the scenario did, in a tool's terms, and the scoring of records against it.

::

    truth = GroundTruth()
    truth.expect("trash", path="/home/user/Documents/report.txt", ts=deleted_at, tolerance=5)
    score = truth.score(target.trash(), kind="trash")
    assert not score.missed and not score.mismatched

A field given a ``datetime`` is compared (within ``tolerance`` seconds); the others
identify the record. ``compare=`` names the compared fields when that default is wrong.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from pytest_adare.analysis.records import ToolRecords, plain_records
from pytest_adare.analysis.score import Expectation, Score, score

FILE_KIND = "file"
"""The kind :meth:`GroundTruth.expect_fs_diff` expects: a file system entry with ``path``
and ``deleted`` (what :func:`pytest_adare.analysis.fls.parse_fls` gives)."""


class DiffLike(Protocol):
    """What :meth:`GroundTruth.expect_fs_diff` reads of a file system diff."""

    @property
    def created(self) -> Any: ...
    @property
    def deleted(self) -> Any: ...


class GroundTruth:
    """The expectations a test states, in order; :meth:`score` judges records by them."""

    def __init__(self) -> None:
        self.expectations: list[Expectation] = []

    def expect(
        self, kind: str, *, tolerance: float = 0.0, compare: Iterable[str] | None = None,
        **fields: Any,
    ) -> Expectation:  # fmt: skip
        """Expect a record of ``kind`` with these ``fields``.

        :raise ValueError: no identifying field, a ``compare`` name not among the fields,
            a negative tolerance.
        """
        names = list(compare) if compare is not None else [
            name for name, value in fields.items() if isinstance(value, dt.datetime)
        ]  # fmt: skip
        unknown = sorted(set(names) - set(fields))
        if unknown:
            raise ValueError(f"expect({kind!r}): compare names no given field: {unknown}")
        expectation = Expectation(
            kind,
            identify={k: v for k, v in fields.items() if k not in names},
            compare={k: fields[k] for k in names},
            tolerance=tolerance,
        )
        self.expectations.append(expectation)
        return expectation

    def expect_fs_diff(
        self, diff: DiffLike, *, kind: str = FILE_KIND, under: str = "/"
    ) -> list[Expectation]:
        """Each file the diff says was created (``deleted=False``) or deleted
        (``deleted=True``) under ``under``: what the file system diff knows for certain."""
        prefix = under.rstrip("/") + "/"
        added = []
        for deleted, paths in ((False, diff.created), (True, diff.deleted)):
            for path in sorted(str(p) for p in paths):
                if path.startswith(prefix):
                    expectation = Expectation(
                        kind, {"path": path, "deleted": deleted}, origin="the file system diff"
                    )
                    self.expectations.append(expectation)
                    added.append(expectation)
        return added

    def kinds(self) -> set[str]:
        return {e.kind for e in self.expectations}

    def score(
        self, records: Mapping[str, Iterable[Any]] | Iterable[Any], *, kind: str | None = None,
        tool: str = "tool",
    ) -> Score:  # fmt: skip
        """Score ``records``: a mapping kind → records, or with ``kind`` one kind's.

        The expectations of the kinds handed are judged (a kind with no records: each of
        its expectations missed); the others are not this tool's to find. Records are
        Dissect records, mappings or objects with fields
        (:func:`~pytest_adare.analysis.records.plain_record`).

        :raise TypeError: records without ``kind`` that are not a mapping of kinds.
        """
        return self._judge(self._plain(records, kind), tool)

    def _judge(self, found: ToolRecords, tool: str) -> Score:
        """``found`` scored against the expectations of the kinds it holds."""
        return score(tool, [e for e in self.expectations if e.kind in found], found)

    @staticmethod
    def _plain(
        records: Mapping[str, Iterable[Any]] | Iterable[Any], kind: str | None
    ) -> ToolRecords:
        if kind is not None:
            return plain_records({kind: records})
        if isinstance(records, Mapping):
            return plain_records(records)
        raise TypeError("score(records): give kind= or a mapping of kind -> records")
