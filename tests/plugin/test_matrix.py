"""The image matrix without a VM: ids, markers, bad lists, the report and the baseline.

``adare_image`` and ``adare_record`` need no VM until a test reads the guest's OS facts,
so these inner runs exercise the whole matrix on the built-in names without booting.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_adare.plugin.image_facts import facts_from_output
from pytest_adare.plugin.matrix import base_test_id, short_name
from pytest_adare.plugin.matrix_table import Cell, Matrix, compare

TWO = ("--adare-vm=debian", "--adare-vm=debian-desktop")

RECORDING = """
import os
import pytest

def test_name(adare_image, adare_record, adare_checks):
    adare_record("image", adare_image.name)
    adare_record("same", [1, 2])
    adare_checks.check(True, "always")

@pytest.mark.parametrize("n", [1, 2])
def test_param(adare_image, n):
    assert not (n == 2 and adare_image.name == os.environ.get("ADARE_FAIL_ON", "none"))

def test_plain():
    pass
"""


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("-p", "no:cacheprovider", *args)


def test_each_vm_test_runs_once_per_image_with_its_short_name_in_the_id(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_ids=RECORDING)
    result = run(pytester, *TWO, "--collect-only", "-q")
    result.stdout.fnmatch_lines(
        [
            "test_ids.py::test_name[debian]",
            "test_ids.py::test_param[debian-1]",
            "test_ids.py::test_param[debian-2]",
            "test_ids.py::test_name[debian-desktop]",
            "test_ids.py::test_param[debian-desktop-1]",
            "test_ids.py::test_param[debian-desktop-2]",
            "test_ids.py::test_plain",
        ]
    )
    selected = run(pytester, *TWO, "--collect-only", "-q", "-k", "debian-desktop")
    assert "test_ids.py::test_name[debian]" not in selected.outlines
    selected.stdout.fnmatch_lines(["test_ids.py::test_name[debian-desktop]", "*3/7 tests*"])


def test_the_session_header_names_every_image_of_the_matrix(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_ids=RECORDING)
    run(pytester, *TWO, "--collect-only").stdout.fnmatch_lines(
        ["adare: images debian, debian-desktop, accel auto (*), isolation snapshot, *"]
    )
    run(pytester, "--adare-vm=debian", "--collect-only").stdout.fnmatch_lines(
        ["adare: image debian, accel auto (*), isolation snapshot, *"]
    )


def test_suite_named_built_ins_run_under_their_suites_names(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_ids=RECORDING)
    suites = ("--adare-vm=debian:bullseye", "--adare-vm=debian-desktop:bookworm")
    run(pytester, *suites, "--collect-only", "-q").stdout.fnmatch_lines(
        [
            "test_ids.py::test_name[debian-bullseye]",
            "test_ids.py::test_name[debian-desktop-bookworm]",
        ]
    )


def test_the_ini_lists_images_one_per_line_and_one_image_keeps_plain_ids(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_ids=RECORDING)
    pytester.makeini("[pytest]\nadare_vm =\n    debian\n    debian-desktop\n")
    run(pytester, "--collect-only", "-q").stdout.fnmatch_lines(
        ["test_ids.py::test_name[debian]", "test_ids.py::test_name[debian-desktop]"]
    )
    one = run(pytester, "--adare-vm=debian", "--collect-only", "-q")
    one.stdout.fnmatch_lines(["test_ids.py::test_name", "test_ids.py::test_param[1]"])


MARKED = """
import pytest

@pytest.mark.adare_vm(images=["debian-desktop"])
def test_narrowed(adare_image):
    assert adare_image.name == "debian-desktop"

@pytest.mark.adare_vm(image="debian")
def test_one_image(adare_image):
    assert adare_image.name == "debian"
"""


def test_a_marker_narrows_the_list_and_image_keeps_one(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_marked=MARKED)
    result = run(pytester, *TWO, "-v")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        ["*test_marked.py::test_narrowed[[]debian-desktop[]] PASSED*", "*::test_one_image PASSED*"]
    )


def test_without_a_command_line_list_the_marker_sets_it(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_set="""
        import pytest

        @pytest.mark.adare_vm(images=["debian", "disk.qcow2"])
        def test_set(adare_image):
            assert adare_image.spec.endswith(adare_image.name.replace("disk", "disk.qcow2"))
        """
    )
    result = run(pytester, "-v")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*test_set[[]debian[]] PASSED*", "*test_set[[]disk[]] PASSED*"])


@pytest.mark.parametrize(
    ("marker", "message"),
    [
        ('images=["debian-12"]', "images names 'debian-12', which is not one of this "
         "session's --adare-vm images (debian, debian-desktop)"),
        ('images="debian"', "images must be a non-empty list of images, got 'debian'"),
        ('images=[]', "images must be a non-empty list"),
        ('image="debian", images=["debian"]', "give image= or images=, not both"),
    ],
)  # fmt: skip
def test_a_bad_images_marker_is_a_collection_error_naming_it(
    pytester: pytest.Pytester, marker: str, message: str
) -> None:
    pytester.makepyfile(
        test_bad=f"import pytest\n\n@pytest.mark.adare_vm({marker})\n"
        "def test_x(guest):\n    pass\n"
    )
    result = run(pytester, *TWO)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(
        ["*ERROR collecting test_bad.py*", f"*test_bad.py::test_x: *{message}*"]
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--adare-vm=debian", "--adare-vm=debian"), "--adare-vm: image 'debian' given twice"),
        (("--adare-vm=debian", "--adare-vm=debian:bookworm"),
         "--adare-vm: images 'debian' and 'debian:bookworm' are one image (the default "
         "Debian suite's)"),
        (("--adare-vm=debian:nosuch",),
         "--adare-vm: debian:nosuch: unknown Debian suite 'nosuch': the mirror "
         "http://deb.debian.org/debian has no http://deb.debian.org/debian/dists/nosuch/Release"),
        (("--adare-vm=debian", "--adare-vm=debian:Trixie"),
         "--adare-vm: debian:Trixie: 'debian:Trixie': 'Trixie' is not a Debian suite name"),
        (("--adare-vm=a/adare-image.json", "--adare-vm=b/adare-image.json"),
         "*have the same short name 'same' (the test id)*"),
        (("--adare-baseline=old.json",), "--adare-baseline: *old.json: not an adare-matrix.json "
         "(format 'junit', expected 'adare-matrix')"),
        (("--adare-baseline=missing.json",), "--adare-baseline: no file at *missing.json"),
    ],
)  # fmt: skip
def test_bad_lists_and_baselines_are_usage_errors(
    pytester: pytest.Pytester, args: tuple[str, ...], message: str
) -> None:
    for name in ("a", "b"):
        (pytester.path / name).mkdir()
        (pytester.path / name / "adare-image.json").write_text('{"name": "same"}')
    (pytester.path / "old.json").write_text('{"format": "junit"}')
    pytester.makepyfile("def test_x(guest):\n    pass\n")
    result = run(pytester, *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{message}*"])


def _matrix_json(pytester: pytest.Pytester, artifacts: Path) -> dict[str, object]:
    document = json.loads((artifacts / "adare-matrix.json").read_text())
    assert isinstance(document, dict)
    return document


def test_the_matrix_report_shows_verdicts_checks_and_records_side_by_side(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    pytester.makepyfile(test_rec=RECORDING)
    monkeypatch.setenv("ADARE_FAIL_ON", "debian-desktop")
    artifacts = tmp_path / "artifacts"
    html = tmp_path / "report.html"
    result = run(pytester, *TWO, f"--adare-artifacts={artifacts}", f"--html={html}")
    result.assert_outcomes(passed=6, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*- adare: image matrix (3 tests x 2 images, 2 rows differ) -*",
            "  * debian * debian-desktop",
            "test_rec.py::test_name",
            "  verdict * passed * passed",
            "  check always * PASSED * PASSED",
            "≠ record image * debian * debian-desktop[*]",
            '  record same * [[]1, 2[]] * [[]1, 2[]]',
            "test_rec.py::test_param[[]1[]]",
            "test_rec.py::test_param[[]2[]]",
            "≠ verdict * passed * failed[*]",
            f"adare: matrix report {artifacts}/adare-matrix.json, {artifacts}/adare-matrix.md",
        ]
    )
    document = _matrix_json(pytester, artifacts)
    tests = {t["test"]: t for t in document["tests"]}  # type: ignore[attr-defined]
    assert tests["test_rec.py::test_name"]["cells"]["debian-desktop"] == {
        "verdict": "passed", "checks": {"always": "PASSED"},
        "records": {"image": "debian-desktop", "same": [1, 2]},
    }  # fmt: skip
    assert tests["test_rec.py::test_param[2]"]["differences"] == [
        {"row": "verdict", "images": ["debian-desktop"]}
    ]
    assert "test_rec.py::test_plain" not in tests
    markdown = (artifacts / "adare-matrix.md").read_text()
    assert "| verdict | passed | **failed** ≠ |" in markdown
    page = html.read_text()
    assert "adare: image matrix" in page and "debian-desktop ≠" in page


def test_under_xdist_the_workers_cells_reach_the_report(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    pytester.makepyfile(test_rec=RECORDING)
    artifacts = tmp_path / "artifacts"
    result = run(pytester, *TWO, "-n", "2", f"--adare-artifacts={artifacts}")
    result.assert_outcomes(passed=7)
    result.stdout.fnmatch_lines(["*adare: image matrix (3 tests x 2 images, 1 rows differ)*"])
    document = _matrix_json(pytester, artifacts)
    assert [t["test"] for t in document["tests"]] == [  # type: ignore[attr-defined]
        "test_rec.py::test_name", "test_rec.py::test_param[1]", "test_rec.py::test_param[2]"
    ]  # fmt: skip
    assert [i["name"] for i in document["images"]] == ["debian", "debian-desktop"]  # type: ignore[attr-defined]


def test_a_baseline_lists_what_changed(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    pytester.makepyfile(test_rec=RECORDING)
    before = tmp_path / "before"
    run(pytester, *TWO, f"--adare-artifacts={before}").assert_outcomes(passed=7)
    monkeypatch.setenv("ADARE_FAIL_ON", "debian")
    after = tmp_path / "after"
    baseline = before / "adare-matrix.json"
    result = run(pytester, *TWO, f"--adare-artifacts={after}", f"--adare-baseline={baseline}")
    result.assert_outcomes(passed=6, failed=1)
    result.stdout.fnmatch_lines(
        [
            f"*- adare: changes since {baseline} -*",
            "test_rec.py::test_param[[]2[]] [[]debian[]] verdict: passed -> failed",
        ]
    )
    changes = _matrix_json(pytester, after)["baseline"]["changes"]  # type: ignore[index]
    assert changes == [
        {"test": "test_rec.py::test_param[2]", "image": "debian", "row": "verdict",
         "before": "passed", "after": "failed"}
    ]  # fmt: skip
    assert "\\[debian\\] verdict: passed → failed" in (after / "adare-matrix.md").read_text()


def test_a_recorded_value_must_be_bounded_json(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        def test_values(adare_record):
            with pytest.raises(ValueError, match="not JSON"):
                adare_record("x", object())
            with pytest.raises(ValueError, match="more than 4096"):
                adare_record("x", "a" * 5000)
            with pytest.raises(ValueError, match="a name is non-empty text"):
                adare_record("", 1)
            deep = []
            for _ in range(900):  # 1.8 KB of JSON, too deep for the matrix's writers
                deep = [deep]
            with pytest.raises(ValueError, match="nests deeper than 32 lists or objects"):
                adare_record("x", deep)
            value = [1]
            adare_record("x", value)
            value.append(2)
            assert adare_record.values == {"x": [1]}
        """
    )
    run(pytester).assert_outcomes(passed=1)


def test_short_names_and_ids_across_images(tmp_path: Path) -> None:
    (tmp_path / "v13").mkdir()
    (tmp_path / "v13" / "adare-image.json").write_text('{"name": "trixie-app"}')
    (tmp_path / "unnamed").mkdir()
    (tmp_path / "unnamed" / "adare-image.json").write_text("{}")
    assert short_name(str(tmp_path / "v13")) == "trixie-app"
    assert short_name(str(tmp_path / "v13" / "adare-image.json")) == "trixie-app"
    assert short_name(str(tmp_path / "unnamed")) == "unnamed"
    assert short_name("debian-desktop:bookworm") == "debian-desktop-bookworm"
    assert base_test_id("t.py::test_a[debian]", "debian") == "t.py::test_a"
    assert base_test_id("t.py::test_a[debian-desktop-1]", "debian-desktop") == "t.py::test_a[1]"
    assert base_test_id("t.py::test_a[1-debian]", "debian") == "t.py::test_a[1]"
    assert base_test_id("t.py::test_a[x-debian-y]", "debian") == "t.py::test_a[x-y]"
    assert base_test_id("t.py::test_a[debian-desktop]", "debian") == "t.py::test_a[desktop]"


def test_os_facts_from_os_release_and_uname() -> None:
    output = (
        'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nNAME="Debian GNU/Linux"\n'
        'VERSION_ID="12"\nID=debian\nbroken line\n\n@@uname\n6.1.0-28-amd64\n'
    )
    facts = facts_from_output(output)
    assert (facts.distribution, facts.version, facts.kernel) == ("debian", "12", "6.1.0-28-amd64")
    assert facts.pretty_name == "Debian GNU/Linux 12 (bookworm)"


def test_cells_that_differ_from_the_usual_value_are_marked() -> None:
    matrix = Matrix()
    for image, version in (("a", "12"), ("b", "12"), ("c", "13")):
        matrix.add("t", image, Cell("passed", records={"v": version}))
    rows = {row.key: row for row in matrix.rows("t")}
    assert rows["record v"].marked == ("c",) and not rows["verdict"].differs
    later = Matrix()
    later.add("t", "a", Cell("failed", records={"v": "12"}))
    later.add("t", "d", Cell("passed"))
    comparison = compare(matrix, later)
    assert [(c.image, c.key, c.before, c.after) for c in comparison.changes] == [
        ("a", "verdict", "passed", "failed")
    ]
    assert comparison.new == [("t", "d")] and comparison.not_run == 2
