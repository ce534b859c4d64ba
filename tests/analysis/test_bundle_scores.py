"""The scores in the evidence bundle: listed in its manifest with their hashes, and in
CASE as the tool's assertions over the bundle's disk (case_validate, offline)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from pytest_adare.analysis.bundle_scores import SCORES_CASE_FILE, SCORES_FILE, add_scores
from pytest_adare.analysis.validation import ToolValidation
from pytest_adare.forensics.evidence_bundle import (
    CASE_FILE,
    BundleFacts,
    verify_bundle,
    write_bundle,
)
from tests.analysis import steps
from tests.analysis.conftest import HOME, Disk


def _bundle(dest: Path, disk: Disk) -> Path:
    dest.mkdir()
    shutil.copyfile(disk.path, dest / "disk.raw")
    facts = BundleFacts(image_name="debian-desktop", image_disk_sha256=None,
                        qemu_version="7.2", qemu_argv=["qemu-system-x86_64"],
                        host_at_pause=disk.deleted_at.timestamp())  # fmt: skip
    write_bundle(dest, [("disk", dest / "disk.raw")], facts)
    return dest


def _case_validate(path: Path) -> subprocess.CompletedProcess[str]:
    binary = Path(sys.executable).parent / "case_validate"
    return subprocess.run([str(binary), str(path)], capture_output=True, text=True, timeout=300)


def test_the_scores_join_the_bundle_as_the_tools_assertions(
    tmp_path: Path, desktop_disk: Disk
) -> None:
    bundle = _bundle(tmp_path / "bundle", desktop_disk)
    truth = ToolValidation()
    truth.expect("trash", path=f"{HOME}/Documents/report.txt", ts=desktop_disk.deleted_at)
    truth.expect("trash", path=f"{HOME}/Documents/budget.ods")
    truth.validate(steps.desktop_artifacts, bundle / "disk.raw")

    manifest = add_scores(bundle, truth.validations)
    assert [f["name"] for f in manifest["files"]] == ["disk.raw", SCORES_FILE, SCORES_CASE_FILE]
    assert verify_bundle(bundle) == []
    (score,) = json.loads((bundle / SCORES_FILE).read_text())["scores"]
    assert score["counts"]["found"] == 1 and score["counts"]["missed"] == 1

    graph = json.loads((bundle / SCORES_CASE_FILE).read_text())["@graph"]
    statements = [n["uco-core:statement"] for n in graph if n["@type"] == "uco-core:Assertion"]
    assert statements[0].startswith(f"found: trash path={HOME}/Documents/report.txt (ts=")
    assert statements[1] == f"missed: trash path={HOME}/Documents/budget.ods ((no record))"
    (action,) = [n for n in graph if n["@type"] == "case-investigation:InvestigativeAction"]
    disk_node = json.loads((bundle / CASE_FILE).read_text())["@graph"][1]["@id"]
    assert action["uco-action:object"] == [{"@id": disk_node}]
    for path in (bundle / SCORES_CASE_FILE, bundle / CASE_FILE):
        done = _case_validate(path)
        assert done.returncode == 0 and "Conforms: True" in done.stdout, done.stdout
