"""The import graph of our three packages, read from the source (no import-linter).

Every ``import`` counts: module level, inside functions, under ``TYPE_CHECKING``.
A cycle anywhere is a failure, and an import inside a function must say on the
line before why it is deferred.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("frame_codec", "adare_guest", "pytest_adare")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def source_modules() -> dict[str, Path]:
    return {
        module_name(path): path
        for package in PACKAGES
        for path in sorted((REPO / package).rglob("*.py"))
    }


def imported_names(tree: ast.AST, module: str, is_package: bool) -> Iterator[tuple[ast.stmt, str]]:
    """(statement, dotted name) for every import, ``from X import Y`` as both X and X.Y."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")
                anchor = anchor[: len(anchor) - node.level + (1 if is_package else 0)]
                base = ".".join([*anchor, base] if base else anchor)
            yield node, base
            for alias in node.names:
                yield node, f"{base}.{alias.name}"


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        for _node, target in imported_names(tree, name, path.name == "__init__.py"):
            if target in modules and target != name:
                graph[name].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in sorted(graph[node]):
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_cycle_finder_finds_a_planted_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]


def test_relative_and_from_imports_resolve_to_modules() -> None:
    tree = ast.parse("from . import codec\nfrom .decoder import FrameDecoder\nimport json\n")
    names = [name for _node, name in imported_names(tree, "frame_codec", True)]
    assert "frame_codec.codec" in names and "frame_codec.decoder" in names and "json" in names


def test_no_import_cycles_in_our_packages() -> None:
    modules = source_modules()
    assert "pytest_adare.plugin.fixtures" in modules  # the scan sees the whole tree
    assert cycles(import_graph(modules)) == []


def test_imports_inside_functions_say_why_they_are_deferred() -> None:
    unexplained = []
    for name, path in source_modules().items():
        if not name.startswith("pytest_adare"):
            continue
        lines = path.read_text().splitlines()
        tree = ast.parse("\n".join(lines), str(path))
        for function in ast.walk(tree):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(function):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    # One comment may explain a block of consecutive imports.
                    above = node.lineno - 2
                    while above >= 0 and lines[above].strip().startswith(("from ", "import ")):
                        above -= 1
                    if above < 0 or not lines[above].strip().startswith("#"):
                        unexplained.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert unexplained == [], "deferred imports need a one-line reason comment above them"


HEAVY = ("numpy", "PIL", "websockets", "qemu.qmp", "pytest_adare.vm", "pytest_adare.guest")


@pytest.mark.parametrize("entry", ["pytest_adare.plugin", "pytest_adare"])
def test_loading_the_plugin_imports_no_vm_layer(entry: str) -> None:
    probe = (
        f"import sys, pytest, {entry}, pytest_adare.plugin.fixtures, pytest_adare.plugin.reports\n"
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=REPO
    )
    assert result.stdout.strip() == "[]"


def test_top_level_names_resolve_on_first_use() -> None:
    probe = (
        "import sys, pytest_adare\n"
        "before = 'pytest_adare.vm' in sys.modules\n"
        "vm = pytest_adare.VM\n"
        "print(before, 'pytest_adare.vm' in sys.modules, vm.__module__, "
        "sorted(set(pytest_adare.__all__) - set(dir(pytest_adare))))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=REPO
    )
    assert result.stdout.split() == ["False", "True", "pytest_adare.vm", "[]"]


def test_every_host_module_has_a_place_in_the_layers() -> None:
    # An unlisted module is outside the contract: its upward imports would go unseen.
    import tomllib

    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    (layers,) = [
        c["layers"] for c in config["tool"]["importlinter"]["contracts"]
        if c["name"] == "host layers"
    ]  # fmt: skip
    entries = [name.strip() for layer in layers for name in layer.replace(":", "|").split("|")]
    modules = source_modules()
    graph = import_graph(modules)
    outside = [
        name for name in modules
        if name.startswith("pytest_adare.")
        and not any(name == e or name.startswith(f"{e}.") for e in entries)
        # a package whose modules are placed one by one: its __init__ must import nothing
        and not (any(e.startswith(f"{name}.") for e in entries) and not graph[name])
    ]  # fmt: skip
    assert outside == [], f"place these in pyproject's host layers: {outside}"


def test_every_module_outside_the_backends_is_forbidden_to_import_them() -> None:
    # The forbidden contract lists its sources by name: a new top-level module must join.
    import tomllib

    from pytest_adare.machine.registry import backends

    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    (contract,) = [
        c for c in config["tool"]["importlinter"]["contracts"]
        if c["name"] == "nothing outside a backend imports a backend"
    ]  # fmt: skip
    packages = sorted({b.module.rsplit(".", 1)[0] for b in backends()})
    assert sorted(contract["forbidden_modules"]) == packages
    top_level = {
        ".".join(name.split(".")[:2]) for name in source_modules()
        if name.startswith("pytest_adare.")
    }  # fmt: skip
    assert sorted(top_level - set(packages)) == sorted(contract["source_modules"])
