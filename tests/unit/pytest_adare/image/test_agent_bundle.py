"""The agent bundle: a deterministic zipapp of pure-Python code that runs on a stock python3."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from adare_guest.identity import source_hash
from pytest_adare.image.agent_bundle import build_agent_bundle, bundle_bytes, bundle_id


@pytest.fixture(autouse=True)
def _private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def test_same_code_gives_the_same_bytes_and_cache_file(tmp_path: Path) -> None:
    assert bundle_bytes() == bundle_bytes()
    first, second = build_agent_bundle(), build_agent_bundle()
    assert first == second
    assert first.path.parent == tmp_path / "cache" / "pytest-adare" / "bundles"


def test_bundle_id_member_is_the_hash_of_every_other_member() -> None:
    bundle = build_agent_bundle()
    with zipfile.ZipFile(bundle.path) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    assert members["BUNDLE_ID"].decode().strip() == bundle.bundle_hash
    assert bundle_id(members) == bundle.bundle_hash
    changed = dict(members)
    changed["serial/__init__.py"] += b"\n# another pyserial release\n"
    assert bundle_id(changed) != bundle.bundle_hash


def test_identity_covers_third_party_content_not_only_our_sources() -> None:
    # Same adare_guest and frame_codec sources, different third-party content.
    console, gui = build_agent_bundle(), build_agent_bundle(gui=True)
    assert console.bundle_hash != gui.bundle_hash
    assert source_hash() not in (console.bundle_hash, gui.bundle_hash)


def test_bundle_holds_only_pure_python_agent_code() -> None:
    names = zipfile.ZipFile(build_agent_bundle().path).namelist()
    assert "__main__.py" in names
    assert {
        "adare_guest/cli.py",
        "frame_codec/__init__.py",
        "serial/serialposix.py",
        "adare_guest/websocket/server.py",
        "adare_guest/websocket/server.pyc",
    } <= set(names)
    assert not [n for n in names if n.endswith((".so", ".c", ".pyd"))]
    # The agent's WebSocket server is its own: websockets does not go in.
    assert not [n for n in names if n.startswith(("websockets/", "pyautogui/"))]


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
        "import adare_guest.server, serial, adare_guest.cli;"
        "from adare_guest.websocket import server as websocket_server;"
        "from adare_guest.identity import bundle_hash;"
        "print(websocket_server.__file__); print(bundle_hash());"
        "print('websockets' in sys.modules, 'importlib.metadata' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-S", "-I", "-c", script, str(bundle.path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    where, inside_hash, websockets_imported, metadata_imported = done.stdout.split()
    assert where.startswith(str(bundle.path))
    assert where.endswith(".pyc"), "zipimport compiled the source: the bundled .pyc is unusable"
    assert inside_hash == bundle.bundle_hash
    assert websockets_imported == "False"
    assert metadata_imported == "False"


def test_an_agent_run_from_sources_reports_the_source_hash() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "from adare_guest.identity import bundle_hash; print(bundle_hash())",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stdout.strip() == source_hash()


def test_a_bundle_without_bundle_id_falls_back_to_the_source_hash(tmp_path: Path) -> None:
    old = tmp_path / "old.pyz"
    with zipfile.ZipFile(build_agent_bundle().path) as archive, zipfile.ZipFile(old, "w") as out:
        for name in archive.namelist():
            if name != "BUNDLE_ID":
                out.writestr(name, archive.read(name))
    script = (
        "import sys; sys.path.insert(0, sys.argv[1]);"
        "from adare_guest.identity import bundle_hash, source_hash;"
        "print(bundle_hash() == source_hash(), len(bundle_hash()))"
    )
    done = subprocess.run(
        [sys.executable, "-S", "-I", "-c", script, str(old)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stdout.split() == ["True", "64"]


def test_a_missing_gui_package_names_the_extra_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from pytest_adare.image import agent_bundle

    monkeypatch.setattr(agent_bundle, "GUI_PACKAGES", ("adare_no_such_gui_pkg",))
    with pytest.raises(ModuleNotFoundError, match=r"pytest-adare\[gui\]"):
        agent_bundle._package_dir("adare_no_such_gui_pkg")
    with pytest.raises(ModuleNotFoundError) as plain:
        agent_bundle._package_dir("adare_no_such_other_pkg")
    assert "[gui]" not in str(plain.value)


def test_a_second_start_reuses_the_bundle_until_a_source_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_adare.image import agent_bundle

    package = tmp_path / "site" / "extra_agent_part"
    package.mkdir(parents=True)
    source = package / "__init__.py"
    source.write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setattr(agent_bundle, "AGENT_PACKAGES",
                        (*agent_bundle.AGENT_PACKAGES, "extra_agent_part"))  # fmt: skip
    compiled: list[str] = []
    real_compile = agent_bundle._compile
    monkeypatch.setattr(agent_bundle, "_compile",
                        lambda data, name: compiled.append(name) or real_compile(data, name))
    first = build_agent_bundle()
    assert "extra_agent_part/__init__.py" in compiled
    compiled.clear()
    assert build_agent_bundle() == first and compiled == []  # nothing compiled again
    source.write_text("VALUE = 22\n")  # edited in place: another size
    changed = build_agent_bundle()
    assert changed.sha256 != first.sha256 and "extra_agent_part/__init__.py" in compiled
    with zipfile.ZipFile(changed.path) as archive:
        assert archive.read("extra_agent_part/__init__.py") == b"VALUE = 22\n"
