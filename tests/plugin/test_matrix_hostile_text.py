"""The matrix report given hostile text, as a guest (its recorded values, its os-release)
or a planted baseline file would send it: nothing reaches the terminal raw, nothing in
``adare-matrix.md`` renders live, and a baseline that is too deep, too large, a FIFO or
of the wrong shape is a usage error naming it (no VM: the values are recorded as a
test would record what it read)."""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from markdown_it import MarkdownIt

from pytest_adare.plugin.image_facts import facts_from_output
from pytest_adare.plugin.matrix_table import Cell, Matrix, compare, render_markdown

TWO = ("--adare-vm=debian", "--adare-vm=debian-desktop")
ESCAPES = "\x1b]0;owned\x07\x1b[2J\x1b]52;c;cm0gLXJmIH4=\x07\x9b"
LIVE = (
    "![x](https://evil.example/x.png) [click](javascript:alert(1)) "
    "<img src=x onerror=alert(1)> <script>alert(2)</script> <https://evil.example/auto> "
    "www.evil.example https://evil.example/bare a@evil.example `code` **bold** _em_ "
    "~~gone~~ | pipe &amp; [ref][1]"
)
"""Every way a Markdown text becomes a link, an image, a tag or markup."""

HOSTILE_TEST = f"""
import os

def test_reads(adare_image, adare_record, adare_checks):
    adare_record("title", {ESCAPES!r} + adare_image.name)
    adare_record("links", {LIVE!r})
    adare_checks.check(True, "ok", detail={ESCAPES!r})
"""


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("-p", "no:cacheprovider", *args)


def no_raw_controls(text: str) -> bool:
    return not any(ch in text for ch in "\x1b\x07\x9b\x00")


def test_recorded_values_and_a_baseline_reach_the_terminal_escaped(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    pytester.makepyfile(test_hostile=HOSTILE_TEST)
    baseline = tmp_path / "planted.json"
    planted_cell = {"verdict": f"passed{ESCAPES}", "checks": {}, "records": {"title": ESCAPES}}
    baseline.write_text(json.dumps({
        "format": "adare-matrix", "version": 1, "images": [],
        "tests": [{"test": "test_hostile.py::test_reads",
                   "cells": {"debian": planted_cell, f"x{ESCAPES}": planted_cell}}],
    }))  # fmt: skip
    artifacts = tmp_path / "artifacts"
    result = run(pytester, *TWO, f"--adare-artifacts={artifacts}", f"--adare-baseline={baseline}")
    result.assert_outcomes(passed=2)
    out = result.stdout.str()
    assert no_raw_controls(out), [line for line in result.outlines if not no_raw_controls(line)]
    result.stdout.fnmatch_lines(
        [
            "*- adare: image matrix (1 tests x 2 images, 1 rows differ) -*",
            "≠ record title * \\x1b]0;owned\\x07\\x1b[[]2… * \\x1b]0;owned\\x07\\x1b[[]2…[*]",
            f"*- adare: changes since {baseline} -*",
            "test_hostile.py::test_reads [[]debian[]] verdict: passed\\x1b]0;owned\\x07* -> passed",
        ]
    )
    # The files keep the values as recorded.
    document = json.loads((artifacts / "adare-matrix.json").read_text())
    cell = document["tests"][0]["cells"]["debian"]
    assert cell["records"]["title"] == ESCAPES + "debian"
    assert no_raw_controls((artifacts / "adare-matrix.md").read_text())


class Rendered(HTMLParser):
    """The tags and the text of rendered HTML."""

    def __init__(self, page: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: set[str] = set()
        self.text: list[str] = []
        self.feed(page)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)

    def handle_data(self, data: str) -> None:
        self.text.append(data)


HOSTILE_OS_RELEASE = (
    f'PRETTY_NAME="{LIVE.replace(chr(34), "")}"\nID=debian\nVERSION_ID="12{ESCAPES}"\n'
    "@@uname\n6.1.0 <b>[k](javascript:x)</b>\n"
)


def test_the_markdown_report_renders_guest_text_as_text(tmp_path: Path) -> None:
    matrix = Matrix()
    matrix.facts["debian"] = asdict(facts_from_output(HOSTILE_OS_RELEASE))
    for image in ("debian", "trixie"):
        records: dict[str, Any] = {"links": LIVE, LIVE: image, "list": [LIVE]}
        matrix.add(f"t.py::test_x[{LIVE}]", image, Cell("passed", {LIVE: "PASSED"}, records))
    before = Matrix()
    before.add(f"t.py::test_x[{LIVE}]", "debian", Cell("failed", records={"links": "old"}))
    markdown = render_markdown(matrix, compare(before, matrix), baseline=LIVE)
    assert no_raw_controls(markdown)
    # GFM links bare addresses without any markup: none is left whole.
    for bare in ("www.evil", "https://", "a@evil", "javascript:"):
        assert bare not in markdown
    page = MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(markdown)
    rendered = Rendered(page)
    # Only the report's own structure; ≠ cells are its own bold.
    assert rendered.tags <= {"h1", "h2", "p", "table", "thead", "tbody", "tr", "th", "td",
                             "ul", "li", "strong"}, rendered.tags  # fmt: skip
    text = "".join(rendered.text)
    assert "[click](javascript:alert(1))" in text and "<script>alert(2)</script>" in text
    assert "![x](https://evil.example/x.png)" in text and "a@evil.example" in text


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("[" * 100_000 + "]" * 100_000, "nests deeper than an adare-matrix.json does"),
        (json.dumps({"format": "adare-matrix", "version": 1, "tests": [{"test": "t", "cells": {
            "debian": {"verdict": "passed", "checks": {}, "records": {"x": json.loads(
                "[" * 900 + "]" * 900)}}}}]}),
         "nested deeper than a matrix is (recorded values nest at most 32 deep)"),
        (json.dumps({"format": "adare-matrix", "version": 1, "tests": [{"test": "t", "cells": {
            "debian": {"verdict": "passed", "checks": {"c": ["PASSED"]}, "records": {}}}}]}),
         "tests[[]0[]].cells[[]'debian'[]].checks is not labels to verdicts (text)"),
        (json.dumps({"format": "adare-matrix", "version": 1, "tests": [{"test": "t", "cells": {
            "debian": {"verdict": 1, "checks": {}, "records": {}}}}]}),
         "tests[[]0[]].cells[[]'debian'[]] has no verdict (text)"),
        (json.dumps({"format": "x" * 10_000}), "not an adare-matrix.json (format 'xxx*…, "
         "expected 'adare-matrix')"),
    ],
    ids=["100000-deep", "deep-record", "checks-not-text", "verdict-not-text", "long-format"],
)  # fmt: skip
def test_a_malformed_baseline_is_a_usage_error_naming_what_is_wrong(
    pytester: pytest.Pytester, content: str, message: str
) -> None:
    (pytester.path / "old.json").write_text(content)
    pytester.makepyfile("def test_x(guest):\n    pass\n")
    result = run(pytester, *TWO, "--adare-baseline=old.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: --adare-baseline: *old.json*{message}*"])
    assert len(result.stderr.str()) < 1000


def test_a_baseline_that_is_a_fifo_or_too_large_is_refused_at_once(
    pytester: pytest.Pytester,
) -> None:
    os.mkfifo(pytester.path / "fifo.json")  # nobody writes it: a read would wait forever
    with open(pytester.path / "big.json", "wb") as big:
        big.truncate(64 * 2**20 + 1)
    pytester.makepyfile("def test_x(guest):\n    pass\n")
    for name, message in (("fifo.json", "no file at *fifo.json"),
                          ("big.json", "*big.json is larger than 64 MiB")):  # fmt: skip
        result = run(pytester, *TWO, f"--adare-baseline={name}")
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        result.stderr.fnmatch_lines([f"ERROR: --adare-baseline: {message}*"])
