"""Which items an experiment folder becomes: one per environment, ids, skips, tags."""

from __future__ import annotations

import pytest

PLAYBOOK = "actions:\n  - command:\n      command: 'true'\n"


def experiment(pytester: pytest.Pytester, name: str, metadata: str) -> None:
    folder = pytester.path / "experiments" / name
    folder.mkdir(parents=True)
    (folder / "playbook.yml").write_text(PLAYBOOK)
    if metadata:
        (folder / "metadata.yml").write_text(metadata)


def test_one_item_per_mapped_environment(pytester: pytest.Pytester) -> None:
    experiment(pytester, "matrix", "environments: [old, new]\ntags: [slowpoke]\n")
    experiment(pytester, "single", "environments: [old]\n")
    experiment(pytester, "nowhere", "")
    pytester.makeini(
        "[pytest]\nadare_environments =\n    old = debian:bookworm\n    new = debian\n"
    )
    result = pytester.runpytest("--collect-only", "-q", "experiments")
    result.stdout.fnmatch_lines([
        "experiments/matrix/playbook.yml::matrix[old]",
        "experiments/matrix/playbook.yml::matrix[new]",
        "experiments/nowhere/playbook.yml::nowhere",
        "experiments/single/playbook.yml::single",
    ])  # fmt: skip
    selected = pytester.runpytest("--collect-only", "-q", "-k", "slowpoke", "experiments")
    assert "matrix[old]" in selected.stdout.str() and "single" not in selected.stdout.str()


def test_an_unmapped_environment_is_skipped_with_the_line_to_add(
    pytester: pytest.Pytester,
) -> None:
    experiment(pytester, "win", "environments: [win11]\n")
    experiment(pytester, "plain", "")
    result = pytester.runpytest("-rs", "experiments")
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines([
        "*plain/playbook.yml: needs a VM image: pass --adare-vm=IMAGE*",
        '*win/playbook.yml: environment win11 is not mapped: add "win11 = IMAGE" to *',
    ])  # fmt: skip


def test_a_bad_mapping_line_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nadare_environments =\n    win11 debian\n")
    result = pytester.runpytest("--collect-only")
    assert "ini key adare_environments: 'win11 debian' is not NAME = IMAGE" in result.stderr.str()


def test_an_environment_named_like_a_built_in_image_runs_on_it_unless_mapped(
    pytester: pytest.Pytester,
) -> None:
    experiment(pytester, "desktop", "environments: [debian-xfce, debian-systemd, win11]\n")
    pytester.makeini("[pytest]\nadare_environments =\n    debian-systemd = debian:bullseye\n")
    pytester.makeconftest(
        "import pytest\n"
        "def pytest_collection_modifyitems(items):\n"
        "    for item in items:\n"
        "        images = [m.kwargs.get('image') for m in item.iter_markers('adare_vm')]\n"
        "        skips = [m.kwargs['reason'] for m in item.iter_markers('skip')]\n"
        "        print('ITEM', item.name, [i for i in images if i], skips)\n"
    )  # fmt: skip
    result = pytester.runpytest("--collect-only", "-q", "-s", "experiments")
    lines = result.stdout.lines
    assert "ITEM desktop[debian-xfce] ['debian-xfce'] []" in lines
    assert "ITEM desktop[debian-systemd] ['debian:bullseye'] []" in lines  # the mapping wins
    assert ("ITEM desktop[win11] [] ['environment win11 is not mapped: add \"win11 = IMAGE\" "
            "to adare_environments']") in lines  # fmt: skip
