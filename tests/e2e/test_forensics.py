"""Forensic diffs, evidence and guest test functions on a real guest.

Uses the plugin's own ``guest`` fixture: run with ``--adare-vm=debian``.
"""

from __future__ import annotations

import csv
import hashlib
import json
from pathlib import Path

import pytest

from pytest_adare.evidence import MANIFEST_NAME
from pytest_adare.fs_snapshot import FsDiff
from pytest_adare.guest import Guest
from pytest_adare.testfunction_upload import assert_outcome

pytestmark = pytest.mark.e2e

ROOT = "/root/fx"
SETUP = f"""
rm -rf {ROOT} && mkdir -p {ROOT} && cd {ROOT} &&
printf abc > same && printf x > gone && printf m > perm && printf o > own &&
printf t > touched && ln -s same link && chmod 644 same perm own touched
"""
ACTION = f"""
cd {ROOT} && printf xyz > same && rm gone && chmod 600 perm && chown 1:1 own &&
ln -sfn perm link && mkdir newdir && printf new > newdir/new &&
touch -d '2030-01-01 00:00:00' touched
"""

CHECKS = """
import asyncio, time
from adare_guest.testfunctions import testfunction

@testfunction
def passes(ctx, path):
    ctx.fail_if(open(path).read() != "xyz", "wrong content")
    return "content ok"

@testfunction
def fails(ctx):
    ctx.fail_if(True, "the trash is still there")

@testfunction
def breaks(ctx):
    raise RuntimeError("cannot look")

@testfunction(timeout=1)
def hangs(ctx):
    time.sleep(30)

@testfunction
async def waits(ctx):
    await asyncio.sleep(0.1)
    return "awaited"

@testfunction
def needs_missing(ctx):
    import adare_no_such_module  # noqa: F401
"""


@pytest.fixture
def diff(guest: Guest) -> FsDiff:
    guest.shell(SETUP).check()
    before = guest.fs_snapshot(ROOT, hash=True)
    guest.shell(ACTION).check()
    return guest.fs_snapshot(ROOT, hash=True).diff(before)


def test_real_guest_diff_sees_each_kind_of_change(diff: FsDiff) -> None:
    assert diff.created == {f"{ROOT}/newdir", f"{ROOT}/newdir/new"}
    assert diff.deleted == {f"{ROOT}/gone"}
    same = diff.modified[f"{ROOT}/same"]
    assert same["sha256"][1] == hashlib.sha256(b"xyz").hexdigest() and "size" not in same
    assert diff.modified[f"{ROOT}/perm"]["mode"] == (0o100644, 0o100600)
    own = diff.modified[f"{ROOT}/own"]
    assert (own["uid"], own["gid"]) == ((0, 1), (0, 1))
    assert diff.modified[f"{ROOT}/link"]["target"] == ("same", "perm")
    assert diff.after_entries[f"{ROOT}/newdir"].kind == "dir"
    assert f"{ROOT}/touched" in diff.timestamps_only
    assert diff.modified[f"{ROOT}/touched"]["mtime"][1] == pytest.approx(1893456000.0)


def test_real_guest_diff_exports_parse_back(diff: FsDiff, tmp_path: Path) -> None:
    assert FsDiff.from_json(diff.export(tmp_path / "d.json")) == diff
    with open(diff.export(tmp_path / "d.csv"), newline="") as stream:
        rows = list(csv.DictReader(stream))
    assert {row["path"] for row in rows} == set(diff.changed_paths)
    lines = diff.export(tmp_path / "d.body", "bodyfile").read_text().splitlines()
    assert len(lines) == len(diff.changed_paths)
    assert all(len(line.split("|")) == 11 for line in lines)
    assert f"0|{ROOT}/gone (REMOVED)|" in "\n".join(lines)


def test_pull_changed_copies_created_and_modified_files(
    guest: Guest, diff: FsDiff, tmp_path: Path
) -> None:
    pulled = guest.pull_changed(diff, tmp_path / "evidence")
    relative = {p.relative_to(tmp_path / "evidence").as_posix() for p in pulled}
    assert relative == {
        "root/fx/newdir/new",
        "root/fx/same",
        "root/fx/perm",
        "root/fx/own",
        "root/fx/touched",
    }
    manifest = json.loads((tmp_path / "evidence" / MANIFEST_NAME).read_text())
    rows = {row["guest_path"]: row for row in manifest["files"]}
    assert rows[f"{ROOT}/same"]["sha256"] == hashlib.sha256(b"xyz").hexdigest()
    assert rows[f"{ROOT}/link"]["status"] == "skipped"
    assert (tmp_path / "evidence/root/fx/newdir/new").read_bytes() == b"new"


def test_guest_test_functions_report_each_verdict(guest: Guest, tmp_path: Path) -> None:
    (tmp_path / "checks").mkdir()
    (tmp_path / "checks" / "checks.py").write_text(CHECKS)
    guest.upload_testfunctions(tmp_path / "checks")
    guest.shell("printf xyz > /tmp/tf-content").check()
    outcomes = {
        name: guest.run_test(f"checks.{name}", **params)
        for name, params in {
            "passes": {"path": "/tmp/tf-content"},
            "fails": {},
            "breaks": {},
            "hangs": {},
            "waits": {},
            "needs_missing": {},
        }.items()
    }
    assert {name: o.status for name, o in outcomes.items()} == {
        "passes": "SUCCESS",
        "fails": "FAILED",
        "breaks": "ERROR",
        "hangs": "ERROR",
        "waits": "SUCCESS",
        "needs_missing": "ERROR",
    }
    assert outcomes["waits"].details == ["awaited"]
    assert "adare_no_such_module" in "\n".join(outcomes["needs_missing"].details)
    assert_outcome(outcomes["passes"], "checks.passes")
    with pytest.raises(pytest.fail.Exception, match="the trash is still there"):
        assert_outcome(outcomes["fails"], "checks.fails")
