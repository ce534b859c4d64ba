"""The option reference in docs/ is what scripts/option_docs.py makes from the option
definition, and ``pytest --markers`` names every marker argument."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from pytest_adare.plugin.options import MARKER_DOC, MARKER_KEYS

REPO = Path(__file__).resolve().parents[2]


def option_docs() -> ModuleType:
    path = REPO / "scripts" / "option_docs.py"
    spec = importlib.util.spec_from_file_location("option_docs", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("option_docs", module)
    spec.loader.exec_module(module)
    return module


def test_the_option_table_marker_list_and_launch_signature_are_current(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert option_docs().main(["--check"]) == 0, capsys.readouterr().out


def test_a_field_changed_without_the_docs_is_caught(tmp_path: Path) -> None:
    docs = option_docs()
    text = (REPO / "docs" / "plugin.md").read_text()
    stale = text.replace("| `--adare-cpus` |", "| `--adare-cpus-old` |")
    assert docs.render(stale, docs.BLOCKS["docs/plugin.md"], "plugin.md") == text


def test_every_option_is_in_the_tables() -> None:
    docs = option_docs()
    table, markers = docs.option_table(), docs.marker_arguments()
    for spec in docs.option_specs():
        assert f"| `{spec.flag}` | `{spec.ini}` |" in table
    for key in MARKER_KEYS:
        assert f"| `{key}` |" in markers
        assert f"{key}=None" in MARKER_DOC
