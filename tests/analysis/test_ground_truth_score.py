"""Scoring records against what the scenario did: each expectation found, mismatched
(which field, expected vs got) or missed; records nobody expected are unexplained."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from unittest.mock import ANY

import pytest

from pytest_adare.analysis import GroundTruth, open_target, parse_fls, run_tool
from pytest_adare.analysis.validation import IN_PROCESS, ToolValidation
from pytest_adare.analysis.versions import validation_report, verdict_table
from tests.analysis import steps
from tests.analysis.conftest import HOME, Disk

REPORT = f"{HOME}/Documents/report.txt"


def test_the_trash_dissect_reads_is_found_within_the_tolerance(desktop_disk: Disk) -> None:
    truth = GroundTruth()
    truth.expect("trash", path=REPORT, ts=desktop_disk.deleted_at + dt.timedelta(seconds=4),
                 tolerance=5)  # fmt: skip
    score = truth.score(open_target(desktop_disk.path).trash(), kind="trash")
    assert [o.expectation.identify for o in score.found] == [{"path": REPORT}]
    assert score.missed == score.mismatched == [] and score.unexplained == ()


def test_a_time_outside_the_tolerance_is_a_mismatch_saying_by_how_much(desktop_disk: Disk) -> None:
    truth = GroundTruth()
    truth.expect("trash", path=REPORT, ts=desktop_disk.deleted_at + dt.timedelta(seconds=9),
                 tolerance=5)  # fmt: skip
    score = truth.score(open_target(desktop_disk.path).trash(), kind="trash")
    assert score.found == []
    (outcome,) = score.mismatched
    (diff,) = outcome.diffs
    assert diff.field == "ts" and diff.got == desktop_disk.deleted_at.isoformat()
    assert diff.reason == "off by 9.000 s (tolerance 5 s)"
    assert outcome.tool_value() == f"ts={desktop_disk.deleted_at.isoformat()}"


def test_what_the_tool_did_not_report_is_missed_and_what_nobody_expected_unexplained(
    desktop_disk: Disk,
) -> None:
    truth = GroundTruth()
    truth.expect("trash", path=f"{HOME}/Documents/budget.ods")
    target = open_target(desktop_disk.path)
    score = truth.score({"trash": target.trash(), "recentlyused": target.recently_used()})
    assert [o.verdict for o in score.outcomes] == ["missed"]
    # Only kinds the truth speaks of count: the recently-used records are not judged.
    assert [(u.kind, u.record["path"]) for u in score.unexplained] == [("trash", REPORT)]


def test_a_record_without_the_compared_field_is_a_mismatch_never_a_find() -> None:
    truth = GroundTruth()
    truth.expect("trash", path=REPORT, ts=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc))
    score = truth.score([{"path": REPORT}], kind="trash")
    (outcome,) = score.outcomes
    assert outcome.verdict == "mismatched"
    assert outcome.diffs[0].reason == "the record has no field 'ts'"
    assert outcome.tool_value() == "ts=(absent)"


def test_a_record_without_the_identifying_field_is_no_find() -> None:
    truth = GroundTruth()
    truth.expect("trash", path=REPORT)
    assert truth.score([{"deleted_path": REPORT}], kind="trash").missed != []


def test_a_text_where_a_time_belongs_is_a_mismatch_naming_it() -> None:
    truth = GroundTruth()
    truth.expect("trash", path=REPORT, ts=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc))
    (outcome,) = truth.score([{"path": REPORT, "ts": "yesterday"}], kind="trash").mismatched
    assert outcome.diffs[0].reason == "'yesterday' is not a timestamp"


def test_the_best_of_several_records_decides() -> None:
    truth = GroundTruth()
    when = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    truth.expect("trash", path=REPORT, ts=when, tolerance=1)
    records = [{"path": REPORT, "ts": "2025-01-01T00:00:00+00:00"},
               {"path": REPORT, "ts": when.isoformat()}]  # fmt: skip
    assert truth.score(records, kind="trash").found[0].record == records[1]


def test_objects_with_fields_score_like_mappings() -> None:
    @dataclass
    class Row:
        path: str
        size: int = field(default=10)

    truth = GroundTruth()
    truth.expect("file", path="/a", size=12, tolerance=2, compare=["size"])
    assert truth.score([Row("/a")], kind="file").found != []


def test_an_expectation_needs_a_field_that_identifies_the_record() -> None:
    truth = GroundTruth()
    with pytest.raises(ValueError, match="no field identifies the record"):
        truth.expect("trash", ts=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc))
    with pytest.raises(ValueError, match=r"compare names no given field: \['size'\]"):
        truth.expect("trash", path=REPORT, compare=["size"])
    with pytest.raises(ValueError, match="tolerance must be >= 0"):
        truth.expect("trash", path=REPORT, tolerance=-1)


def test_records_without_a_kind_are_refused() -> None:
    with pytest.raises(TypeError, match="give kind= or a mapping"):
        GroundTruth().score([{"path": REPORT}])


@dataclass
class Diff:
    created: set[str]
    deleted: set[str]


def test_the_file_system_diff_is_ground_truth_for_fls(desktop_disk: Disk) -> None:
    truth = GroundTruth()
    added = truth.expect_fs_diff(
        Diff({f"{HOME}/Documents/notes.txt", "/etc/hostname"}, {f"{HOME}/Documents/draft.txt"}),
        under=HOME,
    )
    assert [e.identify for e in added] == [
        {"path": f"{HOME}/Documents/notes.txt", "deleted": False},
        {"path": f"{HOME}/Documents/draft.txt", "deleted": True},
    ]
    found = run_tool(
        ["fls", "-r", "-p", "{disk}"], evidence=desktop_disk.path, kind="file",
        parser=lambda text: parse_fls(text, under=f"{HOME}/Documents"),
    )  # fmt: skip
    score = truth.score(found)
    assert [o.verdict for o in score.outcomes] == ["found", "found"]
    assert {u.record["path"] for u in score.unexplained} == {f"{HOME}/Documents"}


def test_records_of_one_kind_judge_only_that_kinds_expectations() -> None:
    truth = GroundTruth()
    truth.expect("trash", path=REPORT)
    truth.expect("recentlyused", href=f"file://{REPORT}")
    score = truth.score([], kind="trash")  # a kind handed with no records: its misses
    assert [(o.expectation.kind, o.verdict) for o in score.outcomes] == [("trash", "missed")]
    both = truth.score({"trash": [{"path": REPORT}], "recentlyused": []})
    assert [o.verdict for o in both.outcomes] == ["found", "missed"]


def test_a_tools_own_run_joins_the_steps_in_one_report(desktop_disk: Disk) -> None:
    truth = ToolValidation()
    truth.expect("trash", path=f"{HOME}/Documents/report.txt", ts=desktop_disk.deleted_at,
                 tolerance=1)  # fmt: skip
    truth.validate(steps.desktop_artifacts, desktop_disk.path)
    truth.expect_fs_diff(Diff(set(), {f"{HOME}/Documents/draft.txt"}), under=HOME)
    found = run_tool(
        ["fls", "-r", "-p", "{disk}"], evidence=desktop_disk.path, kind="file",
        parser=lambda text: parse_fls(text, under=f"{HOME}/Documents"),
    )  # fmt: skip
    fls = truth.score(found, tool="fls")
    assert [(o.expectation.kind, o.verdict) for o in fls.outcomes] == [("file", "found")]
    assert [v.run.tool for v in truth.validations] == [IN_PROCESS, "fls"]
    report = validation_report(truth.validations)
    cells = {row["expectation"]: row["tools"] for row in report["expectations"]}
    assert cells == {
        f"trash path={HOME}/Documents/report.txt": {IN_PROCESS: ANY},
        f"file path={HOME}/Documents/draft.txt deleted=True": {"fls": ANY},
    }
    assert report["version_changes"] == []  # a step and a command: no versions of one tool
    table = verdict_table(report)
    assert f"| file path={HOME}/Documents/draft.txt deleted=True | not judged | found:" in table
