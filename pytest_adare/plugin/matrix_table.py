"""The matrix report as data: tests by images, what differs, what changed (no pytest).

A :class:`Matrix` holds one :class:`Cell` per test and image: the verdict, the soft
checks' verdicts and the recorded values. :meth:`Matrix.rows` lays a test's cells side
by side, one :class:`Row` per verdict, check label and record name, and marks the cells
that differ from the row's usual value (the most common one, the first image's on a
tie). :func:`compare` lists what changed since an earlier run's ``adare-matrix.json``.
The renderers (text, Markdown, HTML) take the data and make the document. Values are
the guests' (and an earlier run's file's): the terminal gets them on one line with
their control characters escaped, Markdown with every ASCII punctuation character
escaped (no link, image, tag or emphasis of theirs is live), HTML escaped::

    >>> m = Matrix()
    >>> m.add("t.py::test_v", "debian", Cell("passed", records={"version": "12"}))
    >>> m.add("t.py::test_v", "trixie", Cell("passed", records={"version": "13"}))
    >>> [(r.key, r.marked) for r in m.rows("t.py::test_v")]
    [('verdict', ()), ('record version', ('trixie',))]
"""

from __future__ import annotations

import html
import json
import string
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pytest_adare.errors import printable

FORMAT = "adare-matrix"
VERSION = 1
MISSING = "—"
TEXT_CELL = 24
"""The widest a terminal cell gets (longer values end in ``…``; the files have them whole)."""
MARKDOWN_CELL = 120
MAX_RECORD_DEPTH = 32
"""How deep a recorded value may nest (``[[...]]``): deeper ones are refused, in a test's
``adare_record`` and in a baseline, before a renderer or JSON writer recurses into them."""
DOCUMENT_DEPTH = 6
"""How deep ``adare-matrix.json`` nests above a cell's recorded values."""


@dataclass
class Cell:
    """One test on one image."""

    verdict: str
    checks: dict[str, str] = field(default_factory=dict)
    """label → verdict (``PASSED``, ``FAILED``, a guest function's ``SUCCESS``...)."""
    records: dict[str, Any] = field(default_factory=dict)

    def values(self) -> dict[str, str]:
        """Row key → the cell's value as text (JSON for records)."""
        values = {"verdict": self.verdict}
        values.update({f"check {label}": verdict for label, verdict in self.checks.items()})
        values.update({f"record {name}": shown(value) for name, value in self.records.items()})
        return values

    def to_json(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "checks": self.checks, "records": self.records}


def shown(value: Any) -> str:
    """A recorded value as one cell's text: text as it is, anything else as JSON."""
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def check_verdicts(checks: list[dict[str, Any]]) -> dict[str, str]:
    """``adare_checks``' recorded checks as label → verdict (a repeated label gets
    ``#2``, ``#3``...)."""
    verdicts: dict[str, str] = {}
    for check in checks:
        label, n = str(check.get("label")), 2
        while label in verdicts:
            label, n = f"{check.get('label')} #{n}", n + 1
        verdicts[label] = str(check.get("verdict"))
    return verdicts


@dataclass(frozen=True)
class Row:
    """One line of a test across images: its values (None: the image has no such value)
    and the images whose value differs from the row's usual one."""

    key: str
    values: dict[str, str | None]
    marked: tuple[str, ...]

    @property
    def differs(self) -> bool:
        return bool(self.marked)


@dataclass(frozen=True)
class Change:
    """A value that is not what the baseline had (None: absent there, or here)."""

    test: str
    image: str
    key: str
    before: str | None
    after: str | None


@dataclass
class Matrix:
    """Tests by images; ``facts`` holds what the guests said they are (per image)."""

    tests: dict[str, dict[str, Cell]] = field(default_factory=dict)
    facts: dict[str, dict[str, str]] = field(default_factory=dict)
    image_order: list[str] = field(default_factory=list)
    """Images in this order first (the session's list), the others as they came."""

    def add(self, test: str, image: str, cell: Cell) -> None:
        self.tests.setdefault(test, {})[image] = cell

    @property
    def images(self) -> list[str]:
        """Every image: those of ``image_order``, then in the order tests first ran on them."""
        seen = dict.fromkeys(image for cells in self.tests.values() for image in cells)
        return [i for i in self.image_order if i in seen] + [
            i for i in seen if i not in self.image_order
        ]

    def arrange(self, position: dict[str, int]) -> None:
        """Tests in the order of ``position`` (test → index; others last), each test's
        cells in the order of :attr:`images`."""
        images = self.images
        ordered = sorted(self.tests.items(), key=lambda kv: position.get(kv[0], len(position)))
        self.tests = {test: {i: cells[i] for i in images if i in cells} for test, cells in ordered}

    def rows(self, test: str) -> list[Row]:
        """The test's rows; with one image nothing is marked."""
        cells = self.tests[test]
        values = {image: cell.values() for image, cell in cells.items()}
        keys = list(dict.fromkeys(key for v in values.values() for key in v))
        rows = []
        for key in keys:
            row = {image: values[image].get(key) for image in cells}
            usual = max(Counter(row.values()).items(), key=lambda kv: kv[1])[0]
            marked = tuple(image for image, value in row.items() if value != usual)
            rows.append(Row(key, row, marked))
        return rows

    def differing(self) -> int:
        """How many rows differ between images."""
        return sum(row.differs for test in self.tests for row in self.rows(test))

    def to_json(self) -> dict[str, Any]:
        """The ``adare-matrix.json`` document (without a baseline's changes)."""
        return {
            "format": FORMAT,
            "version": VERSION,
            "images": [{"name": i, "facts": self.facts.get(i, {})} for i in self.images],
            "tests": [
                {
                    "test": test,
                    "cells": {image: cell.to_json() for image, cell in cells.items()},
                    "differences": [
                        {"row": row.key, "images": list(row.marked)}
                        for row in self.rows(test)
                        if row.differs
                    ],
                }
                for test, cells in self.tests.items()
            ],
        }

    @classmethod
    def from_json(cls, data: Any) -> Matrix:
        """An earlier run's matrix from its ``adare-matrix.json`` document.

        :raise ValueError: not that format or version, nested deeper than a matrix
            holds, or a test or cell of the wrong shape (says which and what).
        """
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            found = data.get("format") if isinstance(data, dict) else data
            raise ValueError(
                f"not an adare-matrix.json (format {brief(found)}, expected {FORMAT!r})"
            )
        if data.get("version") != VERSION:
            raise ValueError(
                f"adare-matrix.json version {brief(data.get('version'))}; this plugin reads "
                f"{VERSION}"
            )
        if nests_deeper(data, DOCUMENT_DEPTH + MAX_RECORD_DEPTH):
            raise ValueError(
                "a malformed adare-matrix.json: nested deeper than a matrix is (recorded "
                f"values nest at most {MAX_RECORD_DEPTH} deep)"
            )
        tests = data.get("tests")
        if not isinstance(tests, list):
            raise ValueError(f"a malformed adare-matrix.json: 'tests' is {brief(tests)}")
        matrix = cls()
        for n, test in enumerate(tests):
            where = f"tests[{n}]"
            if not isinstance(test, dict) or not isinstance(test.get("test"), str):
                raise ValueError(f"a malformed adare-matrix.json: {where} has no test id")
            cells = test.get("cells")
            if not isinstance(cells, dict):
                raise ValueError(f"a malformed adare-matrix.json: {where}.cells is {brief(cells)}")
            for image, cell in cells.items():
                shaped = _cell_from_json(cell, f"{where}.cells[{brief(image)}]")
                matrix.add(test["test"], image, shaped)
        return matrix


def _cell_from_json(cell: Any, where: str) -> Cell:
    """One cell of a baseline, its types checked (a renderer trusts them)."""
    bad = f"a malformed adare-matrix.json: {where}"
    if not isinstance(cell, dict) or not isinstance(cell.get("verdict"), str):
        raise ValueError(f"{bad} has no verdict (text)")
    checks, records = cell.get("checks", {}), cell.get("records", {})
    if not isinstance(checks, dict) or not all(isinstance(v, str) for v in checks.values()):
        raise ValueError(f"{bad}.checks is not labels to verdicts (text)")
    if not isinstance(records, dict):
        raise ValueError(f"{bad}.records is {brief(records)}, not names to values")
    return Cell(cell["verdict"], dict(checks), dict(records))


def brief(value: Any) -> str:
    """A value of a file, short enough for an error message."""
    if isinstance(value, (str, int, float, bool)) or value is None:
        text = repr(value)
        return printable(text if len(text) <= 60 else text[:59] + "…")
    return f"a {type(value).__name__}"


def nests_deeper(value: Any, limit: int) -> bool:
    """Whether the JSON ``value`` nests deeper than ``limit`` (``[]`` is 1, ``[[]]`` 2);
    without recursion, so any depth is safe to ask about."""
    pending: list[tuple[Any, int]] = [(value, 0)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, (list, dict)):
            if depth + 1 > limit:
                return True
            children = item.values() if isinstance(item, dict) else item
            pending.extend((child, depth + 1) for child in children)
    return False


@dataclass(frozen=True)
class Comparison:
    """What changed since a baseline, and what of it this run has no counterpart for."""

    changes: list[Change]
    new: list[tuple[str, str]]
    """(test, image) cells the baseline does not have."""
    not_run: int
    """Cells of the baseline this run does not have (a narrower run: not a change)."""


def compare(before: Matrix, after: Matrix) -> Comparison:
    """Every value of ``after`` that is not what ``before`` had, cell by cell."""
    changes: list[Change] = []
    new: list[tuple[str, str]] = []
    for test, cells in after.tests.items():
        for image, cell in cells.items():
            old_cell = before.tests.get(test, {}).get(image)
            if old_cell is None:
                new.append((test, image))
                continue
            old, now = old_cell.values(), cell.values()
            for key in dict.fromkeys([*now, *old]):
                if old.get(key) != now.get(key):
                    changes.append(Change(test, image, key, old.get(key), now.get(key)))
    not_run = sum(
        image not in after.tests.get(test, {})
        for test, cells in before.tests.items()
        for image in cells
    )
    return Comparison(changes, new, not_run)


def comparison_json(comparison: Comparison, source: str) -> dict[str, Any]:
    return {
        "file": source,
        "changes": [
            {"test": c.test, "image": c.image, "row": c.key, "before": c.before, "after": c.after}
            for c in comparison.changes
        ],
        "new": [{"test": t, "image": i} for t, i in comparison.new],
        "not_run": comparison.not_run,
    }


def one_line(text: str) -> str:
    """``text`` as the terminal shows it: on one line, runs of whitespace as one space,
    control characters escaped (a value cannot move the cursor, set the title, ring)."""
    return printable(" ".join(text.split()))


def _cut(text: str | None, width: int) -> str:
    text = MISSING if text is None else one_line(text)
    return text if len(text) <= width else text[: width - 1] + "…"


def render_text(matrix: Matrix) -> list[str]:
    """The terminal table: per test a line, then its rows; ``*`` marks a differing cell
    and ``≠`` a row that differs."""
    images = matrix.images
    rows = {test: matrix.rows(test) for test in matrix.tests}
    label = max([len(one_line(r.key)) + 4 for rs in rows.values() for r in rs] + [12])
    widths = [
        min(TEXT_CELL, max([len(one_line(image))] + [len(_cut(r.values.get(image), TEXT_CELL))
                                                     + 1 for rs in rows.values() for r in rs]))
        for image in images
    ]  # fmt: skip
    header = "  ".join(f"{one_line(i):<{w}}" for i, w in zip(images, widths, strict=True))
    lines = [(" " * label + header).rstrip()]
    for test, test_rows in rows.items():
        lines.append(one_line(test))
        for row in test_rows:
            cells = []
            for image, width in zip(images, widths, strict=True):
                if image not in matrix.tests[test]:
                    cells.append(f"{'':<{width}}")
                    continue
                text = _cut(row.values.get(image), width - 1)
                cells.append(f"{text + ('*' if image in row.marked else ''):<{width}}")
            lead = "≠ " if row.differs else "  "
            lines.append(f"{lead}{one_line(row.key):<{label - 2}}" + "  ".join(cells).rstrip())
    return lines


def render_changes_text(comparison: Comparison) -> list[str]:
    """One line per change (each value :func:`one_line`)."""
    return _change_lines(comparison, lambda text: one_line(text or MISSING), "[", "]", "->")


def _change_lines(
    comparison: Comparison, shown: Callable[[str | None], str], left: str, right: str, arrow: str
) -> list[str]:
    """The changes, new cells and cells not run, each value made text by ``shown``."""
    lines = [
        f"{shown(c.test)} {left}{shown(c.image)}{right} {shown(c.key)}: "
        + f"{shown(c.before)} {arrow} {shown(c.after)}"
        for c in comparison.changes
    ]
    lines += [
        f"{shown(test)} {left}{shown(image)}{right}: new (not in the baseline)"
        for test, image in comparison.new
    ]
    if not lines:
        lines.append("nothing changed")
    if comparison.not_run:
        lines.append(f"({comparison.not_run} cells of the baseline were not run this time)")
    return lines


# CommonMark lets any ASCII punctuation be backslash-escaped, and only punctuation is
# active inline (links, images, emphasis, code, autolinks, tables, and GFM's bare
# www./https:// and e-mail links need ".", ":" or "@"); & < > become entities, which
# every Markdown (also those without CommonMark's escapes) shows as text.
_MARKDOWN_ESCAPES = {ord(char): "\\" + char for char in string.punctuation} | {
    ord("&"): "&amp;", ord("<"): "&lt;", ord(">"): "&gt;",
}  # fmt: skip


def _md(text: str | None, width: int = MARKDOWN_CELL) -> str:
    """``text`` as inert Markdown: one line, cut to ``width``, every active character
    escaped."""
    return _cut(text, width).translate(_MARKDOWN_ESCAPES)


def render_markdown(matrix: Matrix, comparison: Comparison | None, baseline: str = "") -> str:
    """``adare-matrix.md``: one table per test, differing cells in bold with ``≠``."""
    out = ["# Image matrix", ""]
    if matrix.facts:
        out += ["| image | distribution | version | kernel |", "|---|---|---|---|"]
        for image in matrix.images:
            facts = matrix.facts.get(image, {})
            about = [facts.get(k, "") for k in ("pretty_name", "version", "kernel")]
            out.append(f"| {_md(image)} | " + " | ".join(map(_md, about)) + " |")
        out.append("")
    for test, test_cells in matrix.tests.items():
        images = list(test_cells)
        out += [f"## {_md(test, 1000)}", "", "| | " + " | ".join(map(_md, images)) + " |",
                "|---|" + "---|" * len(images)]  # fmt: skip
        for row in matrix.rows(test):
            shown_cells = [
                f"**{_md(row.values[i])}** ≠" if i in row.marked else _md(row.values[i])
                for i in images
            ]
            out.append(f"| {_md(row.key)} | " + " | ".join(shown_cells) + " |")
        out.append("")
    if comparison is not None:
        out += [f"## Changes since {_md(baseline, 1000)}", ""]
        out += _markdown_changes(comparison)
        out.append("")
    return "\n".join(out)


def _markdown_changes(comparison: Comparison) -> list[str]:
    """The changes as a Markdown list: the values escaped, the report's own words not."""
    return [f"- {line}" for line in _change_lines(comparison, _md, "\\[", "\\]", "→")]


def render_html(matrix: Matrix, comparison: Comparison | None) -> str:
    """The matrix as an HTML fragment for pytest-html's summary."""
    images = matrix.images
    head = "".join(f"<th>{html.escape(i)}</th>" for i in images)
    body = []
    for test, cells in matrix.tests.items():
        body.append(f'<tr><th colspan="{len(images) + 1}">{html.escape(test)}</th></tr>')
        for row in matrix.rows(test):
            tds = []
            for image in images:
                if image not in cells:
                    tds.append("<td></td>")
                    continue
                text = html.escape(row.values.get(image) or MISSING)
                if image in row.marked:
                    tds.append(f'<td style="font-weight:bold">{text} ≠</td>')
                else:
                    tds.append(f"<td>{text}</td>")
            body.append(f"<tr><td>{html.escape(row.key)}</td>{''.join(tds)}</tr>")
    parts = [
        '<h2 id="adare-matrix">adare: image matrix</h2>',
        f"<table><tr><th></th>{head}</tr>{''.join(body)}</table>",
    ]
    if comparison is not None:
        items = "".join(f"<li>{html.escape(line)}</li>" for line in render_changes_text(comparison))
        parts.append(f"<h3>changes since the baseline</h3><ul>{items}</ul>")
    return "".join(parts)
