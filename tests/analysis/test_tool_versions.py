"""The analysis step once per tool version, each in its own cached environment, against
the same export; a version that fails is a "tool failed" score naming it, the others run."""

from __future__ import annotations

import pytest

from pytest_adare.analysis.records import ToolRecords
from pytest_adare.analysis.tool_envs import ToolSpec, tool_python, tools_root
from pytest_adare.analysis.tool_envs import main as tool_envs_main
from pytest_adare.analysis.validation import ToolValidation
from pytest_adare.analysis.versions import record_changes, validation_report, verdict_table
from tests.analysis import steps
from tests.analysis.conftest import DISSECT_VERSIONS, HOME, Disk

OLD, NEW = DISSECT_VERSIONS


def _expect_the_desktop(truth: ToolValidation, disk: Disk) -> None:
    truth.expect("trash", path=f"{HOME}/Documents/report.txt", ts=disk.deleted_at, tolerance=1)
    truth.expect("recentlyused", href=f"file://{HOME}/Documents/notes.txt", added=disk.opened_at)


def test_two_dissect_versions_each_score_the_same_export(desktop_disk: Disk) -> None:
    truth = ToolValidation([OLD, NEW])
    _expect_the_desktop(truth, desktop_disk)
    scores = truth.validate(steps.desktop_artifacts, desktop_disk.path)
    assert list(scores) == [OLD, NEW]
    for score in scores.values():
        assert [o.verdict for o in score.outcomes] == ["found", "found"], score
    pinned = [spec.split("==")[1] for spec in DISSECT_VERSIONS]
    assert [v.run.versions["dissect.target"] for v in truth.validations] == pinned
    assert all("dissect.extfs" in v.run.versions for v in truth.validations)
    table = verdict_table(validation_report(truth.validations))
    assert f"| `{OLD}` | `{NEW}` |" in table
    assert f"| trash path={HOME}/Documents/report.txt | found: ts=" in table


def test_the_environment_is_built_once_and_reused() -> None:
    spec = ToolSpec.parse(NEW)
    python = tool_python(spec)
    assert python.parent.parent.parent == tools_root()
    assert NEW in (python.parent.parent / "requirements.txt").read_text().splitlines()
    assert tool_python(spec) == python


def test_a_version_that_cannot_be_installed_fails_alone(desktop_disk: Disk) -> None:
    truth = ToolValidation(["dissect.target==0.0.1", NEW])
    _expect_the_desktop(truth, desktop_disk)
    broken, working = truth.validate(steps.desktop_artifacts, desktop_disk.path).values()
    assert [o.verdict for o in broken.outcomes] == ["tool failed", "tool failed"]
    assert broken.failure is not None
    assert broken.failure.startswith("dissect.target==0.0.1: cannot be installed: pip install")
    assert broken.found == [] and working.missed == []


@pytest.mark.parametrize(
    ("step", "reason"),
    [
        (steps.crashes, "the analysis step failed: RuntimeError: no plugin for linux"),
        (steps.dies, "the analysis step died (exit status 3)"),
        (steps.hangs, "the analysis step ran over 30 s (killed)"),
    ],
)
def test_a_step_that_crashes_dies_or_hangs_is_tool_failed(
    desktop_disk: Disk, step: steps.Step, reason: str
) -> None:
    truth = ToolValidation([NEW], timeout=30)
    _expect_the_desktop(truth, desktop_disk)
    (score,) = truth.validate(step, desktop_disk.path).values()
    assert score.failure is not None and score.failure.startswith(f"{NEW}: {reason}")
    assert score.found == []


def test_a_tool_spec_is_a_requirement_and_dissect_brings_its_ext4_and_journal_readers() -> None:
    zstd = ("zstandard", 'backports.zstd; python_version < "3.14"')
    assert ToolSpec.parse(NEW).requirements == (NEW, "dissect.extfs", *zstd)
    pinned = ToolSpec.parse(f"{NEW} dissect.extfs==3.12 zstandard==0.25.0")
    assert pinned.requirements == (NEW, "dissect.extfs==3.12", "zstandard==0.25.0", zstd[1])
    with pytest.raises(ValueError, match="a tool is a pip requirement"):
        ToolSpec.parse("  ")
    with pytest.raises(ValueError, match="'==3' is not a pip requirement"):
        ToolSpec.parse("==3")


def test_version_changes_name_the_records_and_fields_that_differ() -> None:
    old: ToolRecords = {"trash": [{"path": "/a", "ts": "t"}, {"path": "/b", "ts": "t"}]}
    new: ToolRecords = {
        "trash": [{"path": "/a", "ts": "t", "user": "u"}, {"path": "/b", "ts": "t"}]
    }
    assert record_changes(old, new) == {
        "trash": {
            "added": [{"path": "/a", "ts": "t", "user": "u"}],
            "removed": [{"path": "/a", "ts": "t"}],
            "fields_added": ["user"],
            "fields_removed": [],
        }
    }
    assert record_changes(old, old) == {}


def test_the_build_command_builds_the_versions_and_names_a_bad_one(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert tool_envs_main(list(DISSECT_VERSIONS)) == 0
    assert capsys.readouterr().out.count(str(tools_root())) == 2
    assert tool_envs_main(["==3"]) == 1
    assert "'==3' is not a pip requirement" in capsys.readouterr().err
    assert tool_envs_main([]) == 2
