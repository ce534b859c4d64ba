"""adare experiments run as pytest items on the built-in console image: one item per
mapped environment, an unmapped one skipped naming the line to add, a bad playbook
failing alone while the others run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

EXPERIMENTS = Path(__file__).parent / "experiments"


def test_experiments_run_as_items(pytester: pytest.Pytester, test_image: str) -> None:
    shutil.copytree(EXPERIMENTS, pytester.path / "experiments")
    broken = pytester.path / "experiments" / "broken"
    broken.mkdir()
    (broken / "playbook.yml").write_text("actions:\n  - comand:\n      command: ls\n")
    pytester.makeini(f"[pytest]\nadare_environments =\n    ubuntu24043 = {test_image}\n")
    pytester.makepyfile(
        test_from_python=f"""
        import pytest

        @pytest.mark.adare_vm(image={test_image!r})
        def test_run_playbook(guest, tmp_path):
            result = guest.run_playbook(
                "experiments/console_flow", variables={{"name": "from-python"}},
                artifacts=tmp_path,
            )
            assert result.passed, result.report()
            assert result.variables["work"].endswith("/from-python")
            assert [v.name for v in result.verdicts] == ["made", "made", "absent", "content"]
            assert (tmp_path / "both" / "one.txt").exists()
        """
    )
    artifacts = pytester.path / "artifacts"
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-rA", f"--adare-artifacts={artifacts}", "experiments",
        "test_from_python.py",
        timeout=900,
    )  # fmt: skip
    output = result.stdout.str()
    result.assert_outcomes(passed=2, failed=1, skipped=4)
    assert 'environment win11 is not mapped: add "win11 = IMAGE" to adare_environments' in output
    assert (
        "broken/playbook.yml:2: actions[0].comand: unknown action: did you mean command?" in output
    )

    assert "desktop is not mapped" in output  # the GUI experiments, here without a desktop
    (found,) = artifacts.rglob("playbook-results.json")
    results = json.loads(found.read_text())
    assert results["passed"] and results["completed"]
    assert results["stopped_by"].endswith("the end")
    assert [(t["name"], t["status"], t["passed"]) for t in results["tests"]] == [
        ("made", "SUCCESS", True), ("made", "SUCCESS", True),
        ("absent", "FAILED", True), ("content", "SUCCESS", True),
    ]  # fmt: skip
    assert not any("never runs" in a["description"] for a in results["actions"])
    variables = results["variables"]
    assert variables["first_line"] == "n=one.txt" and variables["lines"] == 10
    assert variables["total_seen"] == 3 and "after_1" not in variables
    assert variables["after_0"] == 0 and variables["after_2"] == 2
    assert "index" not in variables and "file" not in variables
    pauses = [a for a in results["actions"] if a["kind"] == "pause"]
    assert pauses[0]["message"].startswith("not paused")
    folder = found.parent
    assert (folder / "both" / "one.txt").read_text() == "n=one.txt\n"
    assert (folder / "both" / "two.txt").read_text() == "n=two.txt\n"
    assert sorted(p.name for p in (folder / "changed").rglob("*.txt")) == ["one.txt", "two.txt"]
    assert "adare playbook" in output and "snapshot_filesystem" in output
