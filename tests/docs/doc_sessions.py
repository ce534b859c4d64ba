"""The docs' test blocks as one example project per image, run by one ``pytest`` each.

One session per image (not one per block) shares the booted VMs and warm starts, as a
user's own project would. The project holds every test block of that image, the files
that ``# path/file.py`` blocks show, and the fragments that need a guest as test bodies.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

from doc_examples import DocBlock, claims_as_asserts

# Bounds a hung guest: the longest session so far took a few minutes on TCG.
SESSION_TIMEOUT = 1500.0


def session_args(image: str) -> list[str]:
    """What a user types to run the example project: ``pytest --adare-vm=IMAGE``."""
    return [f"--adare-vm={image}"]


@dataclass(frozen=True)
class CaseResult:
    name: str
    outcome: str  # passed, failed, error, skipped
    text: str


def project_source(block: DocBlock) -> str:
    """The file a block becomes in the example project."""
    if block.kind == "guest-fragment":
        body = claims_as_asserts(block.setup + block.source)
        return (f"# {block.id}, run as the body of a test with the guest fixture\n"
                f"def test_example(guest):\n{textwrap.indent(body, '    ')}\n")
    return block.source


class ExampleSession:
    """``pytest --adare-vm=IMAGE`` over the test blocks of one image, started once."""

    def __init__(self, image: str, tests: list[DocBlock], files: list[DocBlock],
                 workdir: Path) -> None:
        self.image = image
        self.tests = tests
        self.project = workdir / "project"
        self.junit = workdir / "junit.xml"
        self.log = workdir / "session.log"
        self._write_project(files)
        self._proc: subprocess.Popen[bytes] | None = None
        self._results: dict[str, list[CaseResult]] | None = None
        self.seconds = 0.0
        self.returncode: int | None = None

    def _write_project(self, files: list[DocBlock]) -> None:
        written: dict[str, DocBlock] = {}
        for block in [*files, *self.tests]:
            other = written.get(block.project_path)
            if other is not None and other.source != block.source:
                raise ValueError(f"{block.id} and {other.id} both write {block.project_path}")
            written[block.project_path] = block
            path = self.project / block.project_path
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(project_source(block))

    def start(self) -> None:
        if self._proc is not None or not self.tests:
            return
        argv = [sys.executable, "-m", "pytest", *session_args(self.image),
                "-p", "no:cacheprovider", f"--junitxml={self.junit}",
                "-o", "junit_family=xunit1", "-ra",
                # One broken block must not hide the others.
                "--continue-on-collection-errors"]
        with self.log.open("wb") as log:
            self._started = time.monotonic()
            self._proc = subprocess.Popen(argv, cwd=self.project, stdout=log,
                                          stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                          env=user_env())

    def results(self) -> dict[str, list[CaseResult]]:
        """Each test block's test cases, by block id (waits for the session)."""
        if self._results is None:
            self.start()
            assert self._proc is not None
            try:
                self.returncode = self._proc.wait(SESSION_TIMEOUT)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
                raise AssertionError(f"the {self.image} example session did not finish within "
                                     f"{SESSION_TIMEOUT:.0f} s:\n{self.output_tail()}") from None
            finally:
                self.seconds = time.monotonic() - self._started
            self._results = self._parse_junit()
        return self._results

    def stop(self) -> None:
        """End a session still running (the outer run was interrupted)."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()

    def output_tail(self, lines: int = 60) -> str:
        text = self.log.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])

    def _parse_junit(self) -> dict[str, list[CaseResult]]:
        if not self.junit.exists():
            raise AssertionError(f"the {self.image} example session wrote no report:\n"
                                 f"{self.output_tail()}")
        by_module = {b.project_path.removesuffix(".py").replace("/", "."): b.id
                     for b in self.tests}
        by_file = {b.project_path: b.id for b in self.tests}
        results: dict[str, list[CaseResult]] = {b.id: [] for b in self.tests}
        for case in ET.parse(self.junit).iter("testcase"):
            block_id = by_file.get(case.get("file", "")) or by_module.get(
                case.get("classname") or case.get("name", ""))
            if block_id is None:
                continue
            outcome, text = "passed", ""
            for child in case:
                if child.tag in ("failure", "error", "skipped"):
                    outcome = {"failure": "failed"}.get(child.tag, child.tag)
                    text = (child.get("message", "") + "\n" + (child.text or "")).strip()
                    break
            results[block_id].append(CaseResult(case.get("name", ""), outcome, text))
        return results


def user_env() -> dict[str, str]:
    """The environment a user's shell has: this venv first on PATH, no outer pytest state."""
    # pytest leaves long assertion reports whole when it sees a CI variable
    # and truncates them at a terminal; the truncation footer quotes '-vv',
    # which also changes how the first report line reads ("E   assert ..."
    # under CI, "E   AssertionError: assert ..." at a terminal). The docs show
    # the terminal, so the harness runs them the way a terminal does.
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("PYTEST_") and k not in ("CI", "BUILD_NUMBER")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


class ExampleSessions:
    """The sessions of every image, started together on the first result asked for."""

    def __init__(self, blocks: list[DocBlock], workdir: Path) -> None:
        files = [b for b in blocks if b.skip_reason is None and b.language == "python"
                 and b.path_header is not None and not b.runs_in_session]
        tests = [b for b in blocks if b.runs_in_session]
        images = sorted({b.image for b in tests})
        self.sessions = {
            image: ExampleSession(image, [b for b in tests if b.image == image], files,
                                  workdir / image)
            for image in images
        }

    def session_of(self, block: DocBlock) -> ExampleSession:
        return self.sessions[block.image]

    def results_of(self, block: DocBlock) -> list[CaseResult]:
        # Both sessions run side by side (two cores): each boots its own VM.
        for session in self.sessions.values():
            session.start()
        return self.session_of(block).results()[block.id]
