"""The agent bundle: a deterministic zipapp of pure-Python code that runs on a stock python3."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from adare_guest.identity import bundle_hash
from pytest_adare.agent_bundle import build_agent_bundle, bundle_bytes


@pytest.fixture(autouse=True)
def _private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def test_same_code_gives_the_same_bytes_and_cache_file(tmp_path: Path) -> None:
    assert bundle_bytes() == bundle_bytes()
    first, second = build_agent_bundle(), build_agent_bundle()
    assert first == second
    assert first.path.parent == tmp_path / "cache" / "pytest-adare" / "bundles"
    assert first.bundle_hash == bundle_hash()


def test_bundle_holds_only_pure_python_agent_code() -> None:
    names = zipfile.ZipFile(build_agent_bundle().path).namelist()
    assert "__main__.py" in names
    assert {
        "adare_guest/cli.py",
        "frame_codec/__init__.py",
        "serial/serialposix.py",
        "websockets/asyncio/server.py",
        "websockets/asyncio/server.pyc",
    } <= set(names)
    assert not [n for n in names if n.endswith((".so", ".c", ".pyd"))]
    assert not [n for n in names if n.startswith(("websockets/legacy/", "pyautogui/"))]


def test_gui_bundle_adds_pyautogui_and_its_pure_python_dependencies() -> None:
    names = set(zipfile.ZipFile(build_agent_bundle(gui=True).path).namelist())
    assert {
        "pyautogui/__init__.py",
        "pymsgbox/__init__.py",
        "pytweening/__init__.py",
        "pyscreeze/__init__.py",
    } <= names


def test_a_plain_python_imports_the_agent_from_the_zip_without_site_packages() -> None:
    bundle = build_agent_bundle()
    script = (
        "import sys; sys.path.insert(0, sys.argv[1]);"
        "import websockets.asyncio.server, serial, adare_guest.cli;"
        "from adare_guest.identity import bundle_hash;"
        "print(websockets.__file__); print(bundle_hash())"
    )
    done = subprocess.run(
        [sys.executable, "-S", "-I", "-c", script, str(bundle.path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    where, inside_hash = done.stdout.split()
    assert where.startswith(str(bundle.path))
    assert inside_hash == bundle.bundle_hash
