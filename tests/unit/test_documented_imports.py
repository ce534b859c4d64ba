"""Every ``pytest_adare`` name the docs show can be imported from where they show it."""

from __future__ import annotations

import builtins
import importlib
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = sorted([REPO / "README.md", *(REPO / "docs").rglob("*.md")])
USER_DOCS = [d for d in DOCS if d.name not in ("architecture.md", "CHANGELOG.md")]

FROM_IMPORT = re.compile(r"from (pytest_adare[\w.]*) import (?:\(([\w,\s]+)\)|([\w, ]+))")
DOTTED = re.compile(r"`(pytest_adare(?:\.\w+)+)`")
ERROR_NAME = re.compile(
    r"`([A-Z]\w*(?:Error|Warning|Violation|Failed|Timeout|Died|Unreachable|Disconnected))`"
)
BARE_CLASSES = ("SnapshotPages", "FsSnapshot", "FsDiff", "VMFactory", "ShellResult")
"""Classes the user docs name without a module: importable from ``pytest_adare``."""
OTHER_PACKAGES = ("frame_codec", "adare_guest.testfunctions")
"""Where the docs' errors of the codec and of guest-side test functions live."""


def from_imports() -> list[tuple[str, str]]:
    found = set()
    for doc in DOCS:
        for module, wrapped, names in FROM_IMPORT.findall(doc.read_text()):
            listed = (wrapped or names).split(",")
            found |= {(module, n.strip()) for n in listed if n.strip()}
    return sorted(found)


def dotted_names() -> list[str]:
    return sorted({name for doc in DOCS for name in DOTTED.findall(doc.read_text())})


@pytest.mark.parametrize(("module", "name"), from_imports())
def test_a_documented_from_import_works(module: str, name: str) -> None:
    assert hasattr(importlib.import_module(module), name), f"from {module} import {name}"


@pytest.mark.parametrize("dotted", dotted_names())
def test_a_documented_dotted_path_resolves(dotted: str) -> None:
    try:
        importlib.import_module(dotted)
    except ModuleNotFoundError:
        module, _, name = dotted.rpartition(".")
        assert hasattr(importlib.import_module(module), name), dotted


def documented_bare_names() -> list[str]:
    names = set(BARE_CLASSES)
    for doc in USER_DOCS:
        names |= set(ERROR_NAME.findall(doc.read_text()))
    return sorted(n for n in names if not hasattr(builtins, n))


@pytest.mark.parametrize("name", documented_bare_names())
def test_an_error_or_class_the_docs_name_bare_imports_from_the_package(name: str) -> None:
    import pytest_adare

    homes = [pytest_adare, *(importlib.import_module(p) for p in OTHER_PACKAGES)]
    assert any(hasattr(home, name) for home in homes), f"from pytest_adare import {name}"


def test_the_scan_finds_the_documented_names() -> None:
    assert ("pytest_adare", "launch") in from_imports()
    assert "pytest_adare.agent.diagnosis.FACTS_SCRIPT" in dotted_names()
    assert {"GuestTestWarning", "SnapshotFormatError", "ProtocolViolation"} <= set(
        documented_bare_names()
    )
