"""YAML read with the line of every mapping and key, so errors can say where.

:func:`load_yaml` returns plain dicts, lists and scalars, except that each mapping is
a :class:`Located` (a ``dict``) that knows its own line and each key's line. Only
YAML's safe types are built, and adare's own tags (:mod:`pytest_adare.playbook.tags`):
an experiment is often someone else's file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from pytest_adare.playbook.tags import register as register_tags

MAX_FILE_BYTES = 4 * 1024 * 1024
"""A playbook larger than this is refused before it is parsed."""


class Located(dict[str, Any]):
    """A YAML mapping with ``line`` (its first line, 1-based) and ``key_lines``."""

    line: int = 0
    key_lines: dict[str, int]

    def line_of(self, key: str) -> int:
        """The line of ``key`` (the mapping's own line when the key is absent)."""
        return self.key_lines.get(key, self.line)


class _LineLoader(yaml.SafeLoader):
    pass


def _construct_mapping(loader: _LineLoader, node: yaml.MappingNode) -> Located:
    loader.flatten_mapping(node)
    mapping = Located()
    mapping.line = node.start_mark.line + 1
    mapping.key_lines = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if not isinstance(key, str):
            key = str(key)
        mapping[key] = loader.construct_object(value_node, deep=True)
        mapping.key_lines[key] = key_node.start_mark.line + 1
    return mapping


_LineLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
    _construct_mapping,
)
register_tags(_LineLoader)  # adare's !re, !reALL, !s, !path


class YamlSyntaxError(ValueError):
    """The file is not YAML; ``line`` is where the parser stopped."""

    def __init__(self, message: str, line: int | None) -> None:
        super().__init__(message)
        self.line = line


def load_yaml(path: Path) -> Any:
    """The document in ``path``, mappings as :class:`Located`.

    :raise YamlSyntaxError: not YAML (the parser's problem and line), or too large.
    :raise OSError: unreadable.
    """
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise YamlSyntaxError(f"{size} bytes, more than {MAX_FILE_BYTES} (not a playbook)", None)
    text = path.read_text(encoding="utf-8", errors="replace")
    try:
        return yaml.load(text, Loader=_LineLoader)
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        line = mark.line + 1 if mark is not None else None
        problem = error.problem or error.context or "not YAML"
        raise YamlSyntaxError(f"YAML syntax error: {problem}", line) from None
    except yaml.YAMLError as error:
        raise YamlSyntaxError(f"YAML error: {str(error)[:200]}", None) from None
