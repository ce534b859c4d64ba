"""``launch()``'s own workdir is a run folder (machine_tools/run_dir.py): removed at the
end, or, with ``keep_workdir=True``, kept for the user unmarked, so that no later run
reaps it."""

from __future__ import annotations

import shutil

import pytest
from image_under_test import image_under_test

from pytest_adare import launch
from pytest_adare.machine_tools.run_dir import MARK, make_run_dir

pytestmark = pytest.mark.e2e


def test_a_kept_workdir_is_the_users_and_outlives_the_next_run_folder() -> None:
    manifest = image_under_test()
    with launch(manifest.path or manifest.disk, keep_workdir=True, progress=None) as vm:
        workdir = vm.workdir
        assert (workdir / MARK).is_file()  # while it runs: this process's run folder
    try:
        assert workdir.is_dir() and not (workdir / MARK).exists()
        shutil.rmtree(make_run_dir("adare-next-"))  # reaps dead makers' folders
        assert workdir.is_dir()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
