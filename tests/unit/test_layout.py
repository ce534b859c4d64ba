"""Where the tests are (docs/architecture.md, "Where a test goes").

``tests/unit/`` mirrors the packages, one folder a package; a host module has a test
file named after it. The modules that had none when the rule came are listed in
``tests/unit/data/host_modules_without_tests.txt``; the list only shrinks.
"""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
UNIT = REPO / "tests" / "unit"
WITHOUT_TESTS = UNIT / "data" / "host_modules_without_tests.txt"
PACKAGES = ("pytest_adare", "adare_guest", "frame_codec")


def host_modules() -> list[str]:
    """Every module of the host package but ``__init__`` and ``__main__``."""
    return sorted(
        path.relative_to(REPO).as_posix()
        for path in (REPO / "pytest_adare").rglob("*.py")
        if path.name not in ("__init__.py", "__main__.py")
    )


def named_test_files() -> set[str]:
    return {path.name for path in (REPO / "tests").rglob("test_*.py")}


def listed_without_tests() -> list[str]:
    lines = WITHOUT_TESTS.read_text().splitlines()
    return [line for line in lines if line and not line.startswith("#")]


def test_a_new_host_module_has_a_test_file_named_after_it() -> None:
    names = named_test_files()
    listed = set(listed_without_tests())
    missing = [
        module
        for module in host_modules()
        if f"test_{Path(module).name}" not in names and module not in listed
    ]
    assert not missing, (
        "no test file named after these host modules: "
        + ", ".join(missing)
        + " (a module's tests go in tests/unit/<package path>/test_<module>.py)"
    )


def test_the_list_of_modules_without_tests_only_shrinks() -> None:
    names, modules = named_test_files(), set(host_modules())
    listed = listed_without_tests()
    assert listed == sorted(set(listed)), f"{WITHOUT_TESTS.name}: keep it sorted, once each"
    tested = [module for module in listed if f"test_{Path(module).name}" in names]
    gone = [module for module in listed if module not in modules]
    assert not tested, f"these have a test file now; delete their lines: {', '.join(tested)}"
    assert not gone, f"these modules are gone; delete their lines: {', '.join(gone)}"


def test_each_mirror_folder_is_a_package_of_the_source() -> None:
    stale, bare = [], []
    for top in PACKAGES:
        for folder in [UNIT / top, *(UNIT / top).rglob("*")] if (UNIT / top).is_dir() else []:
            if not folder.is_dir() or folder.name == "__pycache__":
                continue
            relative = folder.relative_to(UNIT)
            if not (REPO / relative / "__init__.py").is_file():
                stale.append(relative.as_posix())
            if not (folder / "__init__.py").is_file():
                bare.append(relative.as_posix())
    assert not stale, f"tests/unit/ folders with no package of that path: {', '.join(stale)}"
    assert not bare, f"tests/unit/ folders without __init__.py: {', '.join(bare)}"
