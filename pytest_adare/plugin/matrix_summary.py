"""The matrix report at the end of the session: the terminal table, ``adare-matrix.json``
and ``adare-matrix.md`` beside the artifacts, a section of the pytest-html report, and
with ``--adare-baseline=OLD.json`` what changed since that run.

The cells are made from the test reports alone: each VM test carries its image's short
name, its id across images, its soft checks and recorded values as ``user_properties``
(:mod:`.matrix`, :mod:`.checks`, :mod:`.records`), and pytest-xdist ships those with
every report to the controller, so one code path serves a plain run and ``-n N``.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from pytest_adare.plugin.fixtures import ARTIFACTS_ROOT_KEY
from pytest_adare.plugin.image_facts import FACTS_PROPERTY
from pytest_adare.plugin.matrix import IMAGE_PROPERTY, TEST_PROPERTY, session_images
from pytest_adare.plugin.matrix_table import (
    Cell,
    Comparison,
    Matrix,
    check_verdicts,
    compare,
    comparison_json,
    render_changes_text,
    render_html,
    render_markdown,
    render_text,
)
from pytest_adare.plugin.options import adare_options
from pytest_adare.plugin.records import RECORDS_PROPERTY

MATRIX_JSON = "adare-matrix.json"
MATRIX_MARKDOWN = "adare-matrix.md"


@dataclass
class MatrixState:
    """The controller's matrix while reports arrive, and the baseline it is compared with."""

    matrix: Matrix = field(default_factory=Matrix)
    verdicts: dict[str, str] = field(default_factory=dict)
    collected: dict[str, int] = field(default_factory=dict)
    """Node id → its place in the collection (xdist: the first worker's)."""
    position: dict[str, int] = field(default_factory=dict)
    """Test across images → the place of its first node id."""
    baseline: Matrix | None = None
    written: list[Path] = field(default_factory=list)

    def comparison(self) -> Comparison | None:
        return compare(self.baseline, self.matrix) if self.baseline is not None else None


STATE_KEY = pytest.StashKey[MatrixState]()


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


MAX_BASELINE_BYTES = 64 * 2**20
"""The largest ``--adare-baseline`` read (a matrix of a thousand tests on ten images with
a few recorded values each is a few MiB)."""


def load_baseline(path: Path, source: str = "--adare-baseline") -> Matrix:
    """An earlier run's matrix.

    :raise pytest.UsageError: not a regular file, larger than :data:`MAX_BASELINE_BYTES`,
        not JSON, nested too deep, or another format (each naming the file).
    """
    try:
        # O_NONBLOCK: a FIFO named as the baseline must not block the run on its open.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as error:
        raise pytest.UsageError(f"{source}: cannot read {path} ({error.strerror})") from None
    with os.fdopen(fd, "rb") as file:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise pytest.UsageError(f"{source}: {path} is not a regular file")
        raw = file.read(MAX_BASELINE_BYTES + 1)
    if len(raw) > MAX_BASELINE_BYTES:
        raise pytest.UsageError(
            f"{source}: {path} is larger than {MAX_BASELINE_BYTES // 2**20} MiB; "
            "an adare-matrix.json is not"
        )
    try:
        data = json.loads(raw.decode())
    except RecursionError:
        raise pytest.UsageError(
            f"{source}: {path} nests deeper than an adare-matrix.json does"
        ) from None
    except (UnicodeDecodeError, ValueError) as error:
        raise pytest.UsageError(f"{source}: cannot read {path} as JSON ({error})") from None
    try:
        return Matrix.from_json(data)
    except ValueError as error:
        raise pytest.UsageError(f"{source}: {path}: {error}") from None


def pytest_configure(config: pytest.Config) -> None:
    if _is_worker(config):
        return
    baseline = adare_options(config).baseline
    state = MatrixState(baseline=load_baseline(baseline) if baseline is not None else None)
    config.stash[STATE_KEY] = state
    config.pluginmanager.register(ReportCollector(config, state), "adare-matrix-collector")


def _verdict(config: pytest.Config, report: pytest.TestReport, current: str | None) -> str | None:
    category = config.hook.pytest_report_teststatus(report=report, config=config)[0]
    if not category:  # a setup or teardown that passed says nothing
        return current
    if report.when == "teardown" and current not in (None, "passed"):
        return current  # a failed test whose teardown failed too stays failed
    return str(category)


class ReportCollector:
    """Registered on the controller: every phase's report goes into the matrix."""

    def __init__(self, config: pytest.Config, state: MatrixState) -> None:
        self._config = config
        self._state = state

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self._state.collected = {item.nodeid: n for n, item in enumerate(session.items)}

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        if not self._state.collected:
            self._state.collected = {nodeid: n for n, nodeid in enumerate(ids)}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        record_report(self._config, self._state, report)


def record_report(config: pytest.Config, state: MatrixState, report: pytest.TestReport) -> None:
    """Take one phase's report into the matrix (the teardown completes the cell)."""
    properties = [(str(k), v) for k, v in report.user_properties]
    names: dict[str, Any] = dict(properties)
    image, test = names.get(IMAGE_PROPERTY), names.get(TEST_PROPERTY)
    if not isinstance(image, str) or not isinstance(test, str):
        return
    verdict = _verdict(config, report, state.verdicts.get(report.nodeid))
    if verdict is not None:
        state.verdicts[report.nodeid] = verdict
    if report.when != "teardown":
        return
    checks = json.loads(names["adare_checks"]) if "adare_checks" in names else []
    records = json.loads(names[RECORDS_PROPERTY]) if RECORDS_PROPERTY in names else {}
    cell = Cell(state.verdicts.pop(report.nodeid, "unknown"), check_verdicts(checks), records)
    state.matrix.add(test, image, cell)
    place = state.collected.get(report.nodeid, len(state.collected))
    state.position[test] = min(place, state.position.get(test, place))
    for name, value in properties:
        if name == FACTS_PROPERTY:
            for facts_image, facts in json.loads(str(value)).items():
                state.matrix.facts[facts_image] = facts


def artifacts_root(config: pytest.Config) -> Path:
    """Where this process's artifacts go (the controller's under xdist)."""
    if ARTIFACTS_ROOT_KEY in config.stash:
        return config.stash[ARTIFACTS_ROOT_KEY]
    chosen = adare_options(config).artifacts
    if chosen is not None:
        return chosen
    # pytest's own base temp of this session (the workers' are inside it); the factory
    # is what the tmp_path_factory fixture hands out.
    factory: Any = getattr(config, "_tmp_path_factory", None)
    if factory is None:
        return Path.cwd() / "adare-artifacts"
    return Path(factory.getbasetemp()) / "adare-artifacts"


def write_matrix(config: pytest.Config, state: MatrixState) -> list[Path]:
    """``adare-matrix.json`` and ``adare-matrix.md`` under the artifacts root."""
    root = artifacts_root(config)
    root.mkdir(parents=True, exist_ok=True)
    comparison = state.comparison()
    document = state.matrix.to_json()
    baseline = adare_options(config).baseline
    if comparison is not None and baseline is not None:
        document["baseline"] = comparison_json(comparison, str(baseline))
    json_path, md_path = root / MATRIX_JSON, root / MATRIX_MARKDOWN
    json_path.write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n")
    md_path.write_text(render_markdown(state.matrix, comparison, str(baseline or "")))
    return [json_path, md_path]


@pytest.hookimpl(tryfirst=True)  # before pytest-html writes its report with the matrix
def pytest_sessionfinish(session: pytest.Session) -> None:
    state = session.config.stash.get(STATE_KEY, None)
    if state is None or not state.matrix.tests:
        return
    state.matrix.image_order = [image.name for image in session_images(session.config)]
    state.matrix.arrange(state.position)
    state.written = write_matrix(session.config, state)


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    state = config.stash.get(STATE_KEY, None)
    if state is None or not state.matrix.tests:
        return
    images = state.matrix.images
    comparison = state.comparison()
    if len(images) > 1:
        differing = state.matrix.differing()
        terminalreporter.write_sep(
            "-", f"adare: image matrix ({len(state.matrix.tests)} tests x {len(images)} "
            f"images, {differing} rows differ)",
        )  # fmt: skip
        for line in render_text(state.matrix):
            terminalreporter.write_line(line)
    if comparison is not None:
        terminalreporter.write_sep("-", f"adare: changes since {adare_options(config).baseline}")
        for line in render_changes_text(comparison):
            terminalreporter.write_line(line)
    if state.written and (len(images) > 1 or comparison is not None):
        terminalreporter.write_line(
            "adare: matrix report " + ", ".join(str(p) for p in state.written)
        )


@pytest.hookimpl(optionalhook=True)
def pytest_html_results_summary(
    prefix: list[Any], summary: list[Any], postfix: list[Any], session: pytest.Session
) -> None:
    state = session.config.stash.get(STATE_KEY, None)
    if state is not None and state.matrix.tests:
        postfix.append(render_html(state.matrix, state.comparison()))
