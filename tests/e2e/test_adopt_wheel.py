"""Adopting the package as another project does: the built wheel in a fresh venv.

The wheel is built from this tree and installed (dependencies from the package index)
into a venv outside the repository. There, the README's first test runs with the
README's command on the image under test (one VM boot), and an unrelated project runs
with ``-W error``: installing the plugin must add no warning to it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest
from image_under_test import image_under_test

from pytest_adare.cache_dir import cache_root
from pytest_adare.image.cache import image_dir
from pytest_adare.image.recipe import debian_recipe

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1500)]

REPO = Path(__file__).resolve().parents[2]


def readme_first_test() -> str:
    """The python block under the README's "A first test" heading."""
    readme = (REPO / "README.md").read_text()
    section = readme.split("## A first test", 1)[1]
    found = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert found is not None, "README: no python block under 'A first test'"
    return found.group(1)


def run(argv: list[str], cwd: Path, env: dict[str, str], timeout: float) -> str:
    result = subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"{' '.join(argv)} exited {result.returncode}:\n{output}"
    return output


@pytest.fixture(scope="module")
def adopter_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The environment of a user outside this repository, sharing this user's image cache
    (as the plugin tests do: ``XDG_CACHE_HOME`` is where this session finds its images)."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTEST_ADDOPTS", "PYTEST_PLUGINS")
        and not key.startswith(("PYTEST_XDIST", "PYTEST_CURRENT"))
    }
    env["XDG_CACHE_HOME"] = str(cache_root().parent)
    env["HOME"] = str(tmp_path_factory.mktemp("home"))
    return env


@pytest.fixture(scope="module")
def adopter_venv(tmp_path_factory: pytest.TempPathFactory, adopter_env: dict[str, str]) -> Path:
    """A fresh venv outside the repository with the built wheel installed."""
    dist = tmp_path_factory.mktemp("dist")
    run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(REPO)],
        dist,
        adopter_env,
        600,
    )
    wheels = sorted(dist.glob("pytest_adare-*.whl"))
    assert len(wheels) == 1, wheels
    venv = tmp_path_factory.mktemp("adopter") / "venv"
    run([sys.executable, "-m", "venv", str(venv)], venv.parent, adopter_env, 120)
    run(
        [str(venv / "bin/python"), "-m", "pip", "install", "-q", str(wheels[0])],
        venv.parent,
        adopter_env,
        900,
    )
    return venv


def test_readme_first_test_passes_from_the_installed_wheel(
    adopter_venv: Path, adopter_env: dict[str, str], tmp_path: Path
) -> None:
    first_test = readme_first_test()
    assert len(first_test.splitlines()) == 5, first_test
    python = str(adopter_venv / "bin/python")
    where = run(
        [python, "-c", "import pytest_adare; print(pytest_adare.__file__)"],
        tmp_path,
        adopter_env,
        60,
    )
    assert where.strip().startswith(str(adopter_venv)), where
    image = os.environ.get("ADARE_TEST_IMAGE") or "debian"
    if image == "debian":
        # The installed recipe must find the image this session uses, not build another.
        installed_dir = run(
            [
                python,
                "-c",
                "from pytest_adare.image.cache import image_dir\n"
                "from pytest_adare.image.recipe import debian_recipe\n"
                "print(image_dir(debian_recipe()))",
            ],
            tmp_path,
            adopter_env,
            60,
        )
        assert installed_dir.strip() == str(image_dir(debian_recipe()))
    image_under_test()  # built (or found) here, outside the adopter's run

    project = tmp_path / "project"
    project.mkdir()
    (project / "test_first.py").write_text(first_test)
    output = run(
        [str(adopter_venv / "bin/pytest"), f"--adare-vm={image}", "-p", "no:cacheprovider"],
        project,
        adopter_env,
        1200,
    )
    assert re.search(r"\b1 passed\b", output), output


def test_an_unrelated_project_sees_no_warning_from_the_plugin(
    adopter_venv: Path, adopter_env: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / "test_unrelated.py").write_text("def test_sum():\n    assert sum([1, 2]) == 3\n")
    output = run(
        [str(adopter_venv / "bin/pytest"), "-W", "error", "-p", "no:cacheprovider", "-rw"],
        tmp_path,
        adopter_env,
        120,
    )
    assert re.search(r"\b1 passed\b", output), output
    assert "warnings summary" not in output and "Warning:" not in output, output
    # The plugin was loaded in that run, not merely installed.
    plugins = run([str(adopter_venv / "bin/pytest"), "-VV"], tmp_path, adopter_env, 60)
    assert f"pytest-adare-{version('pytest-adare')} at {adopter_venv}" in plugins, plugins
