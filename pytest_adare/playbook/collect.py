"""Experiment folders as pytest items: ``FOLDER/playbook.yml`` → ``FOLDER[ENV]``.

The plugin hands every ``playbook.yml`` it is shown to :class:`ExperimentFile` with the
session's ``adare_environments`` mapping and images. Each environment of the
experiment's ``metadata.yml`` that is mapped becomes one item on its image; one named
like a built-in image (``debian-xfce``) runs on it unless the mapping says otherwise;
any other is a skipped item naming the line to add; an experiment without environments
runs on each ``--adare-vm`` image. An item is a :class:`pytest.Function` using the ``guest``,
``adare_checks`` and ``adare_artifacts`` fixtures, so markers, ``-k``, xdist,
``--adare-keep``, the failure film and ``--adare-pause-on-fail`` apply as to any VM
test. A playbook that cannot be read is an item that fails with the file, line and
field: the other experiments still run.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from pytest_adare.image.manifest import BUILTIN_IMAGES
from pytest_adare.playbook.errors import PlaybookError
from pytest_adare.playbook.load import GUI_ACTIONS, Experiment, load_experiment, uses
from pytest_adare.playbook.runner import run_playbook

REPORT_SECTION = "adare playbook"
TTY = "/dev/tty"


class PlaybookItem(pytest.Function):
    """One experiment on one environment."""

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, 0, f"experiment {self.name}"


class ExperimentFile(pytest.File):
    """A ``playbook.yml``: its experiment, once per environment."""

    def __init__(
        self, *, environments: Mapping[str, str], images: Sequence[str], **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.environments = dict(environments)
        self.images = tuple(images)

    def collect(self) -> Iterator[pytest.Item]:
        folder = self.path.parent.name
        try:
            experiment = load_experiment(self.path)
        except PlaybookError as error:
            yield _failing(self, folder, str(error))
            return
        runs = self.runs(experiment)
        for environment, image, skip in runs:
            name = f"{folder}[{environment or _short(image)}]" if len(runs) > 1 else folder
            item = PlaybookItem.from_parent(
                self, name=name, callobj=_runner(experiment, environment),
            )  # fmt: skip
            if image is not None:
                item.add_marker(pytest.mark.adare_vm(image=image))
            if uses(experiment.playbook.actions, GUI_ACTIONS):
                item.add_marker(
                    pytest.mark.adare_vm(gui=experiment.playbook.settings.gui_execution_mode)
                )
            item.extra_keyword_matches.update(experiment.tags)  # -k selects by tag
            if skip is not None:
                item.add_marker(pytest.mark.skip(reason=skip))
            yield item

    def runs(self, experiment: Experiment) -> list[tuple[str | None, str | None, str | None]]:
        """(environment, image, skip reason) for each item of ``experiment``."""
        if not experiment.environments:
            return [(None, image, None) for image in self.images] or [(None, None, None)]
        runs: list[tuple[str | None, str | None, str | None]] = []
        for environment in experiment.environments:
            image = self.environments.get(environment)
            if image is None and environment in BUILTIN_IMAGES:
                image = environment
            reason = None
            if image is None:
                reason = (
                    f'environment {environment} is not mapped: add "{environment} = IMAGE" '
                    "to adare_environments"
                )
            runs.append((environment, image, reason))
        return runs


def _short(image: str | None) -> str:
    return Path(image).stem if image and "/" in image else str(image)


def _failing(parent: ExperimentFile, name: str, message: str) -> pytest.Item:
    def bad_experiment() -> None:
        pytest.fail(message, pytrace=False)

    return PlaybookItem.from_parent(parent, name=name, callobj=bad_experiment)


def _pause(config: pytest.Config, guest: Any) -> Any:
    def pause(why: str) -> str:
        if hasattr(config, "workerinput") or getattr(config.option, "numprocesses", None):
            return "not paused: xdist workers have no terminal"
        try:
            with open(TTY, "rb", buffering=0):
                pass
        except OSError as error:
            return f"not paused: cannot open {TTY}: {error.strerror} (no terminal)"
        guest.breakpoint()
        return f"paused ({why}) until Enter"

    return pause


def _runner(experiment: Experiment, environment: str | None) -> Any:
    def run_experiment(
        guest: Any, adare_checks: Any, adare_artifacts: Path, request: pytest.FixtureRequest
    ) -> None:
        result = run_playbook(
            guest, experiment.playbook, adare_artifacts,
            pause=_pause(request.config, guest), environment=environment,
        )  # fmt: skip
        request.node.add_report_section("call", REPORT_SECTION, result.report())
        for verdict in result.verdicts:
            expected = "FAILED" if verdict.expect_to_fail else "SUCCESS"
            detail = f"{verdict.function}: {verdict.status}, expected {expected}"
            if verdict.details:
                detail += "; " + "; ".join(verdict.details)
            adare_checks.check(verdict.passed, verdict.name, detail=detail)
        if result.error is not None:
            pytest.fail(f"experiment {experiment.name}: {result.error}", pytrace=False)

    return run_experiment
