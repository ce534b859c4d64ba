"""Failed asserts on diffs explain the unexpected changes (pytest_assertrepr_compare)."""

from __future__ import annotations

import pytest

from pytest_adare.forensics.assertrepr import assertrepr_compare
from pytest_adare.forensics.diff import FsDiff
from pytest_adare.forensics.entry import Entry
from pytest_adare.forensics.snapshot import FsSnapshot


def entry(size: int = 1, mode: int = 0o100644) -> Entry:
    return Entry("file", size, mode, 0, 0, 1, 1.0, 1.0, 1.0, None, None, None)


def example_diff() -> FsDiff:
    before = FsSnapshot("/home/user", {"/home/user/report.pdf": entry(5), "/home/user/a": entry()})
    after = FsSnapshot(
        "/home/user",
        {"/home/user/a": entry(mode=0o100600), "/home/user/.cache/thumb.png": entry(9)},
    )
    return after.diff(before)


def test_deleted_set_comparison_names_unexpected_and_missing_paths() -> None:
    lines = assertrepr_compare("==", example_diff().deleted, {"/home/user/a"})
    assert lines is not None
    text = "\n".join(lines)
    assert lines[0] == "diff.deleted has 1 unexpected and 1 missing paths"
    assert "unexpected in diff.deleted:\n  /home/user/report.pdf  (file, 5 B" in text
    assert "  /home/user/a  (it was modified: mode 0o100644 -> 0o100600)" in text
    assert "  + /home/user/.cache/thumb.png" in text  # the rest of the diff as context


def test_comparison_with_the_empty_diff_lists_every_change() -> None:
    lines = assertrepr_compare("==", example_diff(), FsDiff.empty())
    assert lines is not None
    assert lines[:2] == [
        "the filesystem diff is not the expected one",
        "FsDiff under /home/user: 1 created, 1 deleted, 1 modified (0 timestamps only)",
    ]
    assert "  ~ /home/user/a: mode 0o100644 -> 0o100600" in lines


def test_modified_comparison_shows_unexpected_fields() -> None:
    lines = assertrepr_compare("==", {}, example_diff().modified)
    assert lines is not None
    assert "  /home/user/a: mode 0o100644 -> 0o100600" in lines


def test_membership_failure_says_where_the_path_went() -> None:
    lines = assertrepr_compare("in", "/home/user/report.pdf", example_diff().created)
    assert lines is not None
    assert lines[:2] == ["'/home/user/report.pdf' is not in diff.created", "  (it was deleted)"]


def test_unrelated_comparisons_are_left_to_pytest() -> None:
    assert assertrepr_compare("==", {1}, {2}) is None
    assert assertrepr_compare("<", example_diff().created, {"x"}) is None


def test_the_plugin_explains_a_failed_diff_assert(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        "from pytest_adare.forensics.snapshot import Entry, FsSnapshot\n"
        "E = Entry('file', 1, 0o100644, 0, 0, 1, 1.0, 1.0, 1.0, None, None, None)\n"
        "def test_rm():\n"
        "    before = FsSnapshot('/h', {'/h/r.pdf': E, '/h/keep': E})\n"
        "    after = FsSnapshot('/h', {})\n"
        "    diff = after.diff(before)\n"
        "    assert diff.deleted == {'/h/r.pdf'}\n"
    )
    result = pytester.runpytest("-p", "no:cacheprovider")  # the installed adare plugin
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*diff.deleted has 1 unexpected and 0 missing paths*",
            "*unexpected in diff.deleted:*",
            "*/h/keep  (file, 1 B, mode 0o100644, uid 0, gid 0)*",
        ]
    )
