"""The test's analysis step, run in this process or in a tool version's environment.

A step is a function ``step(target) -> {kind: records}`` in a module that imports only
the standard library and the tool (it is imported again in each tool environment, which
holds nothing else of the test's): given as the function itself or as
``"path/to/module.py:function"``. In an environment it runs as ``python -m
pytest_adare.analysis.step_main`` with only this package on its path (a directory
holding a link to it), and sends its records back as JSON in a file.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_adare.analysis.errors import ToolFailed
from pytest_adare.analysis.records import ToolRecords, plain_records
from pytest_adare.analysis.target import open_target

STEP_TIMEOUT = 900.0
PACKAGE = Path(__file__).resolve().parent.parent
"""The ``pytest_adare`` package directory: the one thing of ours a tool environment sees."""
StepFunction = Callable[[Any], Mapping[str, Iterable[Any]]]


@dataclass(frozen=True)
class AnalysisStep:
    """Where the step's function is: a module file and the function's name in it."""

    path: Path
    function: str

    @classmethod
    def of(cls, step: StepFunction | str) -> AnalysisStep:
        """:raise ValueError: not ``"file.py:function"``, or a function defined in no file
        or not at a module's top level."""
        if isinstance(step, str):
            path, sep, name = step.rpartition(":")
            if not sep or not path.endswith(".py") or not name.isidentifier():
                raise ValueError(f"an analysis step is 'module.py:function', got {step!r}")
            return cls(Path(path).resolve(), name)
        name = getattr(step, "__qualname__", "")
        if not name.isidentifier():
            raise ValueError(f"an analysis step must be a module-level function, got {step!r}")
        return cls(Path(inspect.getfile(step)).resolve(), name)

    def load(self) -> StepFunction:
        """:raise ValueError: no such file or function."""
        if not self.path.is_file():
            raise ValueError(f"no analysis module at {self.path}")
        spec = importlib.util.spec_from_file_location(f"_adare_step_{self.path.stem}", self.path)
        assert spec is not None and spec.loader is not None  # a .py file always has one
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        function = getattr(module, self.function, None)
        if not callable(function):
            raise ValueError(f"{self.path} has no function {self.function}")
        return function  # type: ignore[no-any-return]

    def __str__(self) -> str:
        return f"{self.path.name}:{self.function}"


@dataclass(frozen=True)
class StepRun:
    """One run of the step: the records, or why there are none; its cost on the host."""

    tool: str
    records: ToolRecords | None
    failure: str | None = None
    seconds: float = 0.0
    peak_rss_mib: float | None = None
    versions: Mapping[str, str] = field(default_factory=dict)


def run_in_process(step: StepFunction, evidence: Path) -> ToolRecords:
    """The step over ``evidence`` with the tool installed here."""
    return plain_records(step(open_target(evidence)))


def run_in_environment(
    step: AnalysisStep, python: Path, evidence: Path, tool: str, dists: Iterable[str],
    timeout: float = STEP_TIMEOUT,
) -> StepRun:  # fmt: skip
    """The step in the environment of ``python``, a subprocess with a deadline.

    :raise ToolFailed: it crashed, hung, or sent no records (naming ``tool``).
    """
    with tempfile.TemporaryDirectory(prefix="adare-step-") as scratch:
        shim = Path(scratch) / "path"
        shim.mkdir()
        (shim / "pytest_adare").symlink_to(PACKAGE)
        result = Path(scratch) / "result.json"
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
        env["PYTHONPATH"] = str(shim)
        argv = [
            str(python), "-m", "pytest_adare.analysis.step_main", str(step.path), step.function,
            str(evidence), str(result), *dists,
        ]  # fmt: skip
        started = time.monotonic()
        with tempfile.TemporaryFile() as err:
            process = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, env=env,
                start_new_session=True,
            )  # fmt: skip
            try:
                status = process.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                why = f"the analysis step ran over {timeout:g} s (killed)"
                raise ToolFailed(tool, why) from None
            seconds = time.monotonic() - started
            err.seek(max(0, err.seek(0, os.SEEK_END) - 2000))
            tail = err.read().decode("utf-8", "replace").strip()
        if not result.is_file():
            raise ToolFailed(tool, f"the analysis step died (exit status {status})", tail)
        answer = json.loads(result.read_text())
    if "error" in answer:
        raise ToolFailed(tool, f"the analysis step failed: {answer['error']}", tail)
    return StepRun(
        tool, answer["records"], seconds=seconds, peak_rss_mib=answer["peak_rss_mib"],
        versions=answer["versions"],
    )  # fmt: skip
