"""bench/run_all.py: runs the scripts, pairs figures with their alternatives, edits the doc."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

RUN_ALL = Path(__file__).resolve().parents[2] / "bench" / "run_all.py"


@pytest.fixture(scope="module")
def run_all() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_run_all", RUN_ALL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_codec_script_runs_and_pairs_each_case_with_the_pure_python_crc(
    run_all: ModuleType,
) -> None:
    outcome = run_all.run_script("codec", "debian", quick=True, timeout=300)
    assert outcome["ok"], outcome.get("error")
    rows = run_all.comparison_rows({"codec": outcome})
    cases = outcome["result"]["results"]
    assert len(rows) == len(cases)
    assert all(row[2] == "pure-Python CRC" and row[4].endswith("better") for row in rows)


def test_rows_compare_rivals_and_floors_and_skip_missing_figures(run_all: ModuleType) -> None:
    benchmarks = {
        "runtime": {
            "ok": True,
            "result": {"pull_64mib": {"agent_mb_s": 200.0, "qga_guest_file_read_mb_s": 50.0}},
        },
        "agent": {
            "ok": True,
            "result": {
                "pull": {"pull_64mib_mb_per_s": 100.0, "baseline_local_cat_mb_per_s": 1000.0}
            },
        },
    }
    rows = {row[0]: row for row in run_all.comparison_rows(benchmarks)}
    assert rows["file pull 64 MiB"][1:5] == [
        "200 MB/s",
        "QGA `guest-file-read`",
        "50 MB/s",
        "4.0x better",
    ]
    assert rows["pull 64 MiB on localhost"][4] == "10.0x the floor"
    assert len(rows) == 2


def test_only_the_generated_part_of_the_doc_is_replaced(
    run_all: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    doc = tmp_path / "performance.md"
    doc.write_text(f"# Perf\nprose\n{run_all.BEGIN}\nold\n{run_all.END}\nafter\n")
    monkeypatch.setattr(run_all, "PERFORMANCE", doc)
    run_all.write_performance(f"{run_all.BEGIN}\nnew\n{run_all.END}\n")
    assert doc.read_text() == f"# Perf\nprose\n{run_all.BEGIN}\nnew\n{run_all.END}\nafter\n"


def test_each_goal_is_met_or_says_what_limits_it(run_all: ModuleType) -> None:
    def ok(result: dict[str, object]) -> dict[str, object]:
        return {"ok": True, "seconds": 1.0, "result": result}

    benchmarks = {
        "warm_start": ok({"warm": {"median_qemu_start_to_first_tool_s": 0.9}}),
        "runtime": ok({
            "execute_shell_true": {"p50_ms": 40.0},
            "qga_guest_exec_true": {"p50_ms": 50.0},
        }),
        "agent_perf": ok({"shell": {"floor_posix_spawn_sh_c_true_p50_ms": 35.0,
                                    "agent_p50_ms": 52.5}}),
    }  # fmt: skip
    rows = {row[0]: row for row in run_all.goal_rows(benchmarks)}
    warm = rows["QEMU start → first tool answered, second and later sessions (warm start)"]
    assert warm[2:] == ["0.9 s (needed 1.5)", "met", ""]
    shell = rows['`execute_shell("true")` p50']
    assert shell[2:4] == ["40 ms (needed 16.7)", "**missed**"]
    assert "takes 35.0 ms" in shell[4] and "QGA is only 1.4x the floor" in shell[4]
    assert "the agent's path is 1.5x it" in shell[4]
    # a goal whose script did not run is said to be unmeasured, not met
    assert rows["per-test snapshot restore, median"][2] == "not measured"


def test_detail_tables_come_from_the_run_s_figures_only(run_all: ModuleType) -> None:
    def ok(result: object) -> dict[str, object]:
        return {"ok": True, "seconds": 1.0, "result": result}

    benchmarks = {
        "isolation": ok({"restore_breakdown": {"disconnect_ms": 7.6, "loadvm_ms": 123.3,
                                               "reconnect_ms": 179.6, "first_call_ms": 18.1}}),
        "ocr": ok({"console": {"screen": [720, 400], "markers": 20, "exact_first_screenshot": 16,
                               "read_all_variants_s": {"median": 0.14, "max": 0.3},
                               "wait_for_text_s": {"median": 0.04},
                               "cli_vs_inprocess": {"cli_s": 0.95, "inprocess_s": 0.1}}}),
        "libvirt_backend": ok([{"backend": "qemu:///system", "start_s": 8.46,
                                "restore_p50_s": 0.349, "shell_true_p50_ms": 55.2}]),
    }  # fmt: skip
    assert run_all.restore_rows(benchmarks)[1] == [
        "`loadvm` (the RAM from the overlay's internal snapshot)",
        "123.3 ms",
    ]
    assert run_all.ocr_rows(benchmarks) == [
        ["console image, 720x400", "16 / 20", "median 0.14 s, max 0.3 s", "median 0.04 s",
         "0.95 s vs 0.1 s"],
    ]  # fmt: skip
    assert run_all.backend_rows(benchmarks) == [["qemu:///system", "8.46 s", "0.349 s", "55.2 ms"]]
    report = {"date": "d", "image": "debian", "quick": False, "accel": "tcg",
              "machine": {"cpu": "c", "cores": 2, "memory_gib": 1, "os": "o", "python": "p",
                          "qemu": "q"},
              "benchmarks": benchmarks}  # fmt: skip
    text = run_all.markdown(report)
    assert "### Machine backends (libvirt_backend)" in text and "qemu+ssh" not in text
    # no figure that this run did not measure is written into a goal's limit
    assert not [goal.label for goal in run_all.GOALS if "~" in goal.limit(benchmarks)]
    assert run_all.restore_rows({}) == run_all.ocr_rows({}) == run_all.backend_rows({}) == []


def test_a_partial_run_keeps_the_earlier_header_and_dates_what_it_refreshed(
    run_all: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    results, doc = tmp_path / "results.json", tmp_path / "performance.md"
    earlier = {"date": "2026-01-01T00:00:00+00:00", "image": "debian", "quick": False,
               "accel": "tcg", "machine": {"cpu": "c", "cores": 2, "memory_gib": 1, "os": "o",
                                           "python": "p", "qemu": "q"},
               "benchmarks": {"agent": {"ok": True, "seconds": 1.0, "result": {"host": "h"}}}}
    results.write_text(json.dumps(earlier))  # fmt: skip
    monkeypatch.setattr(run_all, "RESULTS", results)
    monkeypatch.setattr(run_all, "PERFORMANCE", doc)
    assert run_all.main(["--only", "codec", "--quick"]) == 0
    report = json.loads(results.read_text())
    assert report["date"] == earlier["date"] and set(report["benchmarks"]) == {"agent", "codec"}
    assert "date" in report["benchmarks"]["codec"] and "date" not in report["benchmarks"]["agent"]
    text = doc.read_text()
    assert "Measured 2026-01-01T00:00:00+00:00 on c" in text
    assert "by `--only`)" in text.split("### codec (")[1].splitlines()[0]
    assert "### agent (1.0 s)\n" in text
