"""The code examples of README.md and docs/, read with Sybil and sorted by how each runs.

Every fenced block with a language is an example, and each one runs (tests/docs/
test_doc_examples.py) or carries a reason why it cannot run on this machine. What the
doc source can say, in HTML comments that the rendered site does not show:

- ``<!-- skip: next "reason" -->`` before a block: it cannot run here (a Windows
  image, a remote host, a CI system's YAML); the reason is shown in the run's summary.
- ``<!-- invisible-code-block: python ... -->`` before a fragment: the set-up it
  needs (``diff = ...``), run first in the same script or test. An invisible block
  that defines ``test_*`` functions is a test of its own: a hidden check of the
  visible example above it (e.g. that a collection's functions pass when run). One
  holding the line ``# docs: fails as the report below shows`` must fail, and its
  report must hold each line of the next plain fence (a ``...`` line stands for more).

How a Python block runs follows from what it is:

- defines ``test_*`` functions: a test file of the doc's example project, run by
  ``pytest --adare-vm=debian`` (``debian-desktop`` when it asks for ``gui=True``
  without an image) in one session with every other such block;
- starts with a ``# path/file.py`` header: a file of that project, written there;
- uses ``guest`` without defining it: the body of a test taking the ``guest`` fixture;
- anything else: a script, run with ``python`` in an empty directory.

A bare comparison statement in a fragment or script (``FsDiff.from_json(p) == diff``)
is what the doc claims, so it runs as an ``assert``.
"""

from __future__ import annotations

import ast
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from sybil import Document, Region
from sybil.parsers.markdown.lexers import DirectiveInHTMLCommentLexer, FencedCodeBlockLexer
from sybil.parsers.markdown.skip import SkipParser

REPO = Path(__file__).resolve().parents[2]
DOCUMENTS = (REPO / "README.md", *sorted((REPO / "docs").glob("*.md")))

# Images whose sessions the harness runs; a test block picks one (see image_for).
CONSOLE_IMAGE = "debian"
DESKTOP_IMAGE = "debian-desktop"

Kind = Literal["test", "file", "guest-fragment", "script", "pytest-command", "shell",
               "console", "json"]

# Fence languages that mark a block as plain text (a synopsis, a listing), not code.
PLAIN_TEXT = frozenset({"text", "txt"})
_PATH_HEADER = re.compile(r"#\s*(?P<path>[\w./-]+\.py)\s*$")
FAILS_AS_SHOWN = "# docs: fails as the report below shows"
_PLAIN_FENCE = re.compile(r"^```\n(?P<text>.*?)^```$", re.MULTILINE | re.DOTALL)


@dataclass(frozen=True)
class DocBlock:
    """One example: where it is, what it is, and the set-up shown before it."""

    doc: str  # the document, relative to the repository: "docs/forensics.md"
    line: int  # the block's first line (its fence, or its comment when invisible)
    language: str
    source: str
    invisible: bool
    setup: str  # invisible set-up blocks right before this one, joined
    skip_reason: str | None
    shown_failure: str | None = None  # the failure report the doc shows for this test

    @property
    def id(self) -> str:
        return f"{self.doc}:{self.line}"

    @property
    def path_header(self) -> str | None:
        """``path/file.py`` when the block's first line names the file it is."""
        match = _PATH_HEADER.fullmatch(self.source.split("\n", 1)[0])
        return match.group("path") if match else None

    @property
    def kind(self) -> Kind:
        if self.language == "python":
            if self.path_header is not None and not _defines_tests(self.source):
                return "file"
            if _defines_tests(self.source):
                return "test"
            if "guest" in _free_names(self.setup + "\n" + self.source):
                return "guest-fragment"
            return "script"
        if self.language == "sh":
            return "pytest-command" if pytest_commands(self.source) else "shell"
        if self.language in ("console", "json"):
            return self.language  # type: ignore[return-value]
        raise ValueError(
            f"{self.id}: no way to run a {self.language!r} block here; mark it with "
            '<!-- skip: next "why it cannot run" --> before the fence'
        )

    @property
    def runs_in_session(self) -> bool:
        """A test, or a fragment run as one, in an example session (not skipped)."""
        if self.skip_reason is not None:
            return False
        try:
            return self.kind in ("test", "guest-fragment")
        except ValueError:  # reported by the block's own test
            return False

    @property
    def image(self) -> str:
        """The built-in image whose session runs this test block."""
        if "gui=True" in self.source and "image=" not in self.source:
            return DESKTOP_IMAGE
        return CONSOLE_IMAGE

    @property
    def slug(self) -> str:
        stem = re.sub(r"\W+", "_", Path(self.doc).stem.lower())
        return f"{stem}_{self.line}"

    @property
    def project_path(self) -> str:
        """Where this block lives in the example project."""
        header = self.path_header
        if header is not None:
            return header
        return f"test_{self.slug}.py"


def pytest_commands(source: str) -> list[list[str]] | None:
    """The arguments of each line when every line of the block is a ``pytest`` command."""
    commands = []
    for line in source.splitlines():
        if not line.strip():
            continue
        try:
            words = shlex.split(line, comments=True)
        except ValueError:  # a line continued on the next: a longer shell script
            return None
        if words[:1] != ["pytest"]:
            return None
        commands.append(words[1:])
    return commands or None


def _defines_tests(source: str) -> bool:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return "def test_" in source
    return any(
        isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test")
        for node in tree.body
    )


def _free_names(source: str) -> set[str]:
    """Names the code reads but never binds (a fragment's context)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()  # runs as a script, which then reports the syntax error
    loaded = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)
              and isinstance(n.ctx, ast.Load)}
    bound = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)
             and isinstance(n.ctx, ast.Store | ast.Del)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound.add(node.name)
    return loaded - bound


def claims_as_asserts(source: str) -> str:
    """The code with each bare top-level comparison turned into an ``assert``."""
    tree = ast.parse(source)
    if not any(isinstance(n, ast.Expr) and isinstance(n.value, ast.Compare) for n in tree.body):
        return source
    tree.body = [
        ast.Assert(test=n.value, msg=ast.Constant(f"the doc claims {ast.unparse(n.value)}"))
        if isinstance(n, ast.Expr) and isinstance(n.value, ast.Compare) else n
        for n in tree.body
    ]
    return ast.unparse(ast.fix_missing_locations(tree))


class _CodeBlocks:
    """Every fenced block with a language, and every ``invisible-code-block``."""

    def __init__(self) -> None:
        self.lexers = [
            FencedCodeBlockLexer(language=r"\S+", mapping={"language": "arguments",
                                                           "source": "source"}),
            DirectiveInHTMLCommentLexer(directive=r"invisible-code-block", arguments=r"\S+"),
        ]

    def __call__(self, document: Document) -> Iterator[Region]:
        for lexer in self.lexers:
            for region in lexer(document):
                if region.lexemes["arguments"] in PLAIN_TEXT:
                    continue
                region.parsed = (str(region.lexemes["arguments"]), str(region.lexemes["source"]),
                                 "directive" in region.lexemes)
                region.evaluator = _not_evaluated_here
                yield region


def _not_evaluated_here(example: object) -> None:
    raise AssertionError("doc blocks run through tests/docs/test_doc_examples.py")


def _skip_reason(arguments: tuple[str, str | None], where: str) -> str:
    action, reason = arguments
    if action != "next" or not reason:
        raise ValueError(f'{where}: write skip markers as <!-- skip: next "reason" -->')
    value = ast.literal_eval(reason)
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{where}: a skip marker's reason is a non-empty string")
    return value


def blocks_of(path: Path) -> list[DocBlock]:
    """The examples of one document, in order, each with its set-up and skip reason."""
    skips = SkipParser()
    document = Document.parse(str(path), _CodeBlocks(), skips)
    doc = path.relative_to(REPO).as_posix() if path.is_relative_to(REPO) else path.name
    blocks: list[DocBlock] = []
    pending_skip: str | None = None
    setup: list[str] = []
    for example in document.examples():
        where = f"{doc}:{example.line}"
        if example.region.evaluator is skips.skipper:
            pending_skip = _skip_reason(example.parsed, where)
            continue
        language, source, invisible = example.parsed
        shown_failure = None
        if FAILS_AS_SHOWN in source:
            report = _PLAIN_FENCE.search(document.text, example.end)
            if report is None:
                raise ValueError(f"{where}: no plain fence after it shows the failure")
            shown_failure = report.group("text")
        block = DocBlock(doc, example.line, language, source, invisible,
                         setup="".join(setup), skip_reason=pending_skip,
                         shown_failure=shown_failure)
        pending_skip = None
        if invisible and not _defines_tests(source):
            setup.append(source)  # set-up for the next visible block
            continue
        setup = []
        blocks.append(block)
    if pending_skip is not None:
        raise ValueError(f"{doc}: a skip marker at the end has no block to skip")
    return blocks


def all_blocks() -> list[DocBlock]:
    return [block for path in DOCUMENTS for block in blocks_of(path)]
