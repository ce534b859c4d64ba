"""Filesystem diffs, their exports and evidence collection on a real QEMU guest.

One VM for the module (``launch()`` on the image of ``image_under_test``); each test
works in its own directory under ``/root``, so the tests do not see each other.
"""

from __future__ import annotations

import csv
import hashlib
import json
import stat
from pathlib import Path

import pytest

from pytest_adare.forensics.diff import FsDiff
from pytest_adare.forensics.evidence import MANIFEST_NAME
from pytest_adare.forensics.export import CSV_COLUMNS
from pytest_adare.forensics.snapshot import FsSnapshot
from pytest_adare.guest import Guest
from pytest_adare.vm import VM

pytestmark = pytest.mark.e2e

ROOT = "/root/forensics"
SETUP = f"""
rm -rf {ROOT} && mkdir -p {ROOT} && cd {ROOT} &&
printf abc > rewritten && printf 'to be removed' > removed &&
printf m > chmodded && printf o > chowned && printf t > touched && printf kept > untouched &&
printf 'first' > first && printf 'second' > second && ln -s first link &&
chmod 644 rewritten removed chmodded chowned touched untouched && chown 0:0 chowned
"""
ACTION = f"""
cd {ROOT} && printf xyz > rewritten && rm removed && chmod 600 chmodded &&
chown 1:2 chowned && ln -sfn second link && mkdir newdir &&
printf 'fresh evidence' > newdir/created.txt && touch -d '2030-01-01 00:00:00' touched
"""
CHANGED_FILES = {"rewritten", "chmodded", "chowned", "touched"}  # regular files, not created


def p(name: str) -> str:
    return f"{ROOT}/{name}"


@pytest.fixture(scope="module")
def vm_guest(console_vm: VM) -> Guest:
    return console_vm.guest


@pytest.fixture(scope="module")
def snapshots(vm_guest: Guest) -> dict[str, FsSnapshot]:
    """Hashed and unhashed snapshots of ROOT before and after ACTION."""
    vm_guest.shell(SETUP).check()
    taken = {
        "before": vm_guest.fs_snapshot(ROOT, hash=True),
        "before_plain": vm_guest.fs_snapshot(ROOT),
    }
    vm_guest.shell(ACTION).check()
    taken["after"] = vm_guest.fs_snapshot(ROOT, hash=True)
    taken["after_plain"] = vm_guest.fs_snapshot(ROOT)
    return taken


@pytest.fixture(scope="module")
def diff(snapshots: dict[str, FsSnapshot]) -> FsDiff:
    return snapshots["after"].diff(snapshots["before"])


def test_snapshot_holds_what_the_guest_shell_sees(
    vm_guest: Guest, snapshots: dict[str, FsSnapshot]
) -> None:
    after = snapshots["after"]
    listed = vm_guest.shell(f"cd {ROOT} && find . -mindepth 1 | sort").check().stdout.split()
    assert {path for path in after if path != ROOT} == {p(name[2:]) for name in listed}
    stat_line = vm_guest.shell(f"stat -c '%s %a %u %g %i' {p('chowned')}").check().stdout.split()
    entry = after[p("chowned")]
    assert [entry.size, stat.S_IMODE(entry.mode), entry.uid, entry.gid, entry.inode] == [
        int(stat_line[0]), int(stat_line[1], 8), *map(int, stat_line[2:])
    ]  # fmt: skip
    sha = vm_guest.shell(f"sha256sum {p('newdir/created.txt')}").check().stdout.split()[0]
    assert entry.kind == "file" and after[p("newdir/created.txt")].sha256 == sha
    assert after[p("link")].kind == "symlink" and after[p("newdir")].kind == "dir"


def test_created_and_deleted_paths(diff: FsDiff) -> None:
    assert diff.created == {p("newdir"), p("newdir/created.txt")}
    assert diff.deleted == {p("removed")}
    assert diff.after_entries[p("newdir")].kind == "dir"
    assert diff.before_entries[p("removed")].size == len("to be removed")
    assert p("untouched") not in diff.changed_paths


def test_same_size_rewrite_shows_only_with_hashing(
    diff: FsDiff, snapshots: dict[str, FsSnapshot]
) -> None:
    fields = diff.modified[p("rewritten")]
    assert fields["sha256"] == (
        hashlib.sha256(b"abc").hexdigest(),
        hashlib.sha256(b"xyz").hexdigest(),
    )
    assert "size" not in fields
    assert p("rewritten") in diff.substantive
    plain = snapshots["after_plain"].diff(snapshots["before_plain"])
    assert "sha256" not in plain.modified[p("rewritten")]
    assert p("rewritten") in plain.timestamps_only


def test_chmod_and_chown(diff: FsDiff) -> None:
    assert diff.modified[p("chmodded")]["mode"] == (0o100644, 0o100600)
    chowned = diff.modified[p("chowned")]
    assert (chowned["uid"], chowned["gid"]) == ((0, 1), (0, 2))
    assert "sha256" not in chowned and "mode" not in chowned


def test_symlink_retarget(diff: FsDiff) -> None:
    assert diff.modified[p("link")]["target"] == ("first", "second")
    assert p("first") not in diff.changed_paths  # the old target itself did not change


def test_touch_is_a_timestamp_only_change(diff: FsDiff) -> None:
    touched = diff.modified[p("touched")]
    assert "mtime" in touched and touched.keys() <= {"mtime", "ctime"}
    assert touched["mtime"][1] == pytest.approx(1893456000.0)  # 2030-01-01T00:00:00Z
    assert p("touched") in diff.timestamps_only
    assert p("touched") not in diff.substantive


def test_json_export_parses_back(diff: FsDiff, tmp_path: Path) -> None:
    written = diff.export(tmp_path / "diff.json")
    document = json.loads(written.read_text())
    assert document["summary"] == {
        "created": 2,
        "deleted": 1,
        "modified": len(diff.modified),
        "timestamps_only": len(diff.timestamps_only),
    }
    by_path = {change["path"]: change for change in document["changes"]}
    assert set(by_path) == set(diff.changed_paths)
    assert by_path[p("removed")]["change"] == "deleted"
    assert by_path[p("chmodded")]["fields"]["mode"] == [0o100644, 0o100600]
    assert by_path[p("touched")]["timestamps_only"] is True
    assert FsDiff.from_json(written) == diff


def test_csv_export_parses_back(diff: FsDiff, tmp_path: Path) -> None:
    with open(diff.export(tmp_path / "diff.csv"), newline="") as stream:
        header, *rows = list(csv.reader(stream))
    assert tuple(header) == CSV_COLUMNS
    expected_rows = len(diff.created) + len(diff.deleted)
    expected_rows += sum(len(fields) for fields in diff.modified.values())
    assert len(rows) == expected_rows
    as_dicts = [dict(zip(header, row, strict=True)) for row in rows]
    assert {row["path"] for row in as_dicts} == set(diff.changed_paths)
    [mode_row] = [r for r in as_dicts if r["path"] == p("chmodded") and r["field"] == "mode"]
    assert (mode_row["change"], mode_row["before"], mode_row["after"]) == (
        "modified", str(0o100644), str(0o100600)
    )  # fmt: skip
    [created] = [r for r in as_dicts if r["path"] == p("newdir")]
    assert (created["change"], created["type"]) == ("created", "dir")


def test_bodyfile_export_has_eleven_fields_per_line(diff: FsDiff, tmp_path: Path) -> None:
    lines = diff.export(tmp_path / "diff.body", "bodyfile").read_text().splitlines()
    assert len(lines) == len(diff.changed_paths)
    fields = [line.split("|") for line in lines]
    assert all(len(f) == 11 for f in fields)
    by_name = {f[1]: f for f in fields}
    removed = by_name[f"{p('removed')} (REMOVED)"]
    entry = diff.before_entries[p("removed")]
    assert removed[2:7] == [str(entry.inode), "r/rrw-r--r--", "0", "0", "13"]
    assert f"{p('newdir')} (ADDED)" in by_name
    assert by_name[f"{p('newdir')} (ADDED)"][3].startswith("d/d")
    modified = [name for name in by_name if name.startswith(f"{p('chmodded')} (MODIFIED")]
    assert len(modified) == 1 and "mode" in modified[0]
    touched = next(f for name, f in by_name.items() if name.startswith(p("touched") + " "))
    assert int(touched[8]) == 1893456000  # mtime column


def test_pull_changed_copies_created_and_modified_files(
    vm_guest: Guest, diff: FsDiff, tmp_path: Path
) -> None:
    dest = tmp_path / "evidence"
    pulled = vm_guest.pull_changed(diff, dest)
    expected = {p("newdir/created.txt")} | {p(name) for name in CHANGED_FILES}
    assert {"/" + path.relative_to(dest).as_posix() for path in pulled} == expected
    for guest_path in expected:
        host_copy = dest / guest_path.lstrip("/")
        assert (
            hashlib.sha256(host_copy.read_bytes()).hexdigest()
            == diff.after_entries[guest_path].sha256
        )
    manifest = json.loads((dest / MANIFEST_NAME).read_text())
    rows = {row["guest_path"]: row for row in manifest["files"]}
    for guest_path in expected:
        assert rows[guest_path]["status"] == "pulled"
        assert rows[guest_path]["sha256"] == diff.after_entries[guest_path].sha256
    assert p("removed") not in {path for path, row in rows.items() if row["status"] == "pulled"}
    assert not (dest / p("removed").lstrip("/")).exists()


def test_watch_fs_reports_the_changes_of_the_block(vm_guest: Guest) -> None:
    root = "/root/watched"
    vm_guest.shell(f"rm -rf {root} && mkdir {root} && printf a > {root}/old").check()
    with vm_guest.watch_fs(root) as watch:
        vm_guest.shell(f"printf b > {root}/new && rm {root}/old").check()
    assert watch.diff is not None
    assert (watch.diff.created, watch.diff.deleted) == ({f"{root}/new"}, {f"{root}/old"})


def test_failed_diff_assert_names_the_unexpected_entries(diff: FsDiff) -> None:
    with pytest.raises(AssertionError) as failure:
        assert diff.created == {p("newdir")}
    message = str(failure.value)
    assert "unexpected in diff.created" in message
    assert p("newdir/created.txt") in message
    with pytest.raises(AssertionError) as failure:
        assert diff.modified == {}
    message = str(failure.value)
    assert "unexpected modifications" in message
    assert f"{p('chmodded')}: mode 0o100644 -> 0o100600" in message


def test_assertrepr_hook_answers_for_diffs(pytestconfig: pytest.Config, diff: FsDiff) -> None:
    answers = pytestconfig.hook.pytest_assertrepr_compare(
        config=pytestconfig, op="==", left=diff.deleted, right=set()
    )
    explanation = "\n".join(line for answer in answers if answer for line in answer)
    assert "unexpected in diff.deleted" in explanation
    assert p("removed") in explanation
