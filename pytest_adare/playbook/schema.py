"""The playbook format, as adare defines it, checked field by field.

:func:`parse_playbook` turns the YAML of a ``playbook.yml`` into a :class:`Playbook` of
:class:`Step` s, refusing what adare refuses: an unknown action or field (with a close
match: ``comand: did you mean command?``), a value of the wrong type, a missing
required field, a ``test:`` naming no test of ``tests:``, a loop with both or neither
of ``times`` and ``items``, a condition with more than one operator. Every error is a
:class:`~pytest_adare.playbook.errors.PlaybookError` with the file, line and field.

Templates (``{{name}}``) are kept as written: they are filled in when the step runs,
with the variables of that moment (a loop's ``item``, a captured output).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_adare.playbook.errors import PlaybookError
from pytest_adare.playbook.source import Located

NUMBER = (int, float)
TEXT = (str,)
FLAG = (bool,)


@dataclass(frozen=True)
class Fields:
    """What a mapping may hold: ``name -> types`` (a tuple of Python types, or a nested
    :class:`Fields` / a parser name for structured values), and which are required."""

    allowed: Mapping[str, Any]
    required: frozenset[str] = frozenset()


CONDITION_OPERATORS = ("equals", "contains", "matches", "greater_than", "less_than", "is_empty")
VARIABLE_CONDITION = Fields(
    {"variable": TEXT, "equals": (str, int, float, bool, list, dict), "contains": TEXT,
     "matches": TEXT, "greater_than": NUMBER + TEXT, "less_than": NUMBER + TEXT,
     "is_empty": FLAG},
    frozenset({"variable"}),
)  # fmt: skip
TEXT_MATCH = Fields(
    {"mode": TEXT, "flags": (list,), "allow_missing_chars": (bool, str, list),
     "max_missing": (int,), "min_similarity": NUMBER, "case_sensitive": FLAG}
)  # fmt: skip
OFFSET = Fields({"x": (int,), "y": (int,), "base": TEXT})
STRATEGIES = {
    "SweepStrategy": Fields({"index": (int,)}),
    "BestConfidenceStrategy": Fields({}),
    "ClosestToStrategy": Fields(
        {"x": (int,), "y": (int,), "text": TEXT, "image": TEXT, "max_distance": (int,)}
    ),
    "TopLeftStrategy": Fields({}),
    "TopRightStrategy": Fields({}),
    "BottomLeftStrategy": Fields({}),
    "BottomRightStrategy": Fields({}),
    "LargestStrategy": Fields({}),
    "SmallestStrategy": Fields({}),
}
TARGET = Fields(
    {"image": TEXT, "text": TEXT, "text_match": TEXT_MATCH, "position": (list,),
     "strategy": "strategy", "offset": OFFSET, "use_cache": FLAG}
)  # fmt: skip
PRESENCE = Fields({"text": TEXT, "image": TEXT})
CAPTURE = Fields({"variable": TEXT, "source": TEXT, "parser": TEXT}, frozenset({"variable"}))
PIXEL_CHANGE = Fields({"above": NUMBER, "below": NUMBER, "strategy": TEXT, "idle": NUMBER})
SKIP = Fields({"pixel_change": PIXEL_CHANGE})

ACTIONS: dict[str, Fields] = {
    "command": Fields(
        {"command": TEXT, "name": TEXT, "description": TEXT, "tool": TEXT, "cwd": TEXT,
         "env": (dict,), "timeout": NUMBER, "shell": FLAG, "admin": FLAG,
         "background": FLAG, "capture": CAPTURE, "allow_failure": FLAG},
        frozenset({"command"}),
    ),
    "keyboard": Fields(
        {"key": TEXT, "text": TEXT, "combination": (list,), "when": "presence_list",
         "description": TEXT}
    ),
    "click": Fields({"target": TARGET, "type": TEXT, "description": TEXT}, frozenset({"target"})),
    "drag": Fields({"src": TARGET, "dst": TARGET, "description": TEXT}, frozenset({"src", "dst"})),
    "idle": Fields({"duration": NUMBER, "description": TEXT}, frozenset({"duration"})),
    "scroll": Fields(
        {"direction": TEXT, "amount": (int,), "description": TEXT},
        frozenset({"direction", "amount"}),
    ),
    "goto": Fields({"target": TARGET, "description": TEXT}, frozenset({"target"})),
    "test": Fields({"name": TEXT, "description": TEXT, "timeout": NUMBER}, frozenset({"name"})),
    "screenshot": Fields(
        {"description": TEXT, "name": TEXT, "x": (int,), "y": (int,), "width": (int,),
         "height": (int,)}
    ),
    "save_timestamp": Fields({"variable": TEXT, "description": TEXT}, frozenset({"variable"})),
    "save_variable": Fields(
        {"name": TEXT, "value": (str, int, float, bool, list, dict, type(None)),
         "description": TEXT},
        frozenset({"name", "value"}),
    ),
    "pull": Fields(
        {"src": (str, list), "dst": TEXT, "description": TEXT, "mode": TEXT},
        frozenset({"src"}),
    ),
    "snapshot_filesystem": Fields(
        {"variable": TEXT, "root_path": TEXT, "timeout": NUMBER, "description": TEXT},
        frozenset({"variable"}),
    ),
    "pull_changed_files": Fields(
        {"snapshot_before": TEXT, "snapshot_after": TEXT, "dst": TEXT, "mode": TEXT,
         "include_modified": FLAG, "include_added": FLAG, "description": TEXT},
        frozenset({"snapshot_before", "snapshot_after"}),
    ),
    "pause": Fields({"message": TEXT, "name": TEXT, "description": TEXT}),
    "stop": Fields({"condition": VARIABLE_CONDITION, "description": TEXT}),
    "continue": Fields({"condition": VARIABLE_CONDITION, "description": TEXT}),
    "block": Fields(
        {"actions": "actions", "description": TEXT, "when": "presence_list", "delay": NUMBER},
        frozenset({"actions"}),
    ),
    "wait_until": Fields(
        {"condition": "wait_condition", "timeout": NUMBER, "check_interval": NUMBER,
         "initial_delay": NUMBER, "skip": SKIP, "description": TEXT},
        frozenset({"condition"}),
    ),
    "loop": Fields(
        {"actions": "actions", "times": (int,), "items": (str, list), "item_var": TEXT,
         "description": TEXT},
        frozenset({"actions"}),
    ),
}  # fmt: skip
"""Every action of adare's playbook format and its fields (adare's ``types/playbook``)."""

SETTINGS = Fields(
    {"idle": NUMBER, "timeout": (*NUMBER, type(None)), "screenshot": (dict, type(None)),
     "continue_on_test_failure": FLAG, "auto_pull_on_test_failure": FLAG,
     "collect_system_info": FLAG, "forensic_logging": FLAG, "enable_filesystem_diff": FLAG,
     "gui_execution_mode": TEXT}
)  # fmt: skip
TEST = Fields(
    {"name": TEXT, "description": TEXT, "function": TEXT, "parameter": (dict, type(None)),
     "expect_to_fail": FLAG, "timeout": NUMBER},
    frozenset({"name", "function"}),
)  # fmt: skip
VARIABLE = Fields(
    {"type": TEXT, "value": (str, int, float, bool, list, dict, type(None)),
     "description": TEXT, "timezone": TEXT, "format": TEXT, "tolerance": (str, int, float),
     "localtime": FLAG},
    frozenset({"value"}),
)  # fmt: skip
PLAYBOOK = Fields(
    {"settings": SETTINGS, "variables": (dict, type(None)), "tests": (list, type(None)),
     "actions": (list,)},
    frozenset({"actions"}),
)  # fmt: skip

VARIABLE_TYPES = (
    "string", "path", "integer", "int", "float", "boolean", "bool", "list", "dict",
    "regex", "timestamp",
)  # fmt: skip
GUI_EXECUTION_MODES = ("auto", "agent", "host")
CLICK_TYPES = ("left", "right", "double")
SCROLL_DIRECTIONS = ("up", "down", "left", "right")
TEXT_MATCH_MODES = ("substring", "regex", "fuzzy", "regex_fuzzy")
OFFSET_BASES = (
    "center", "top-left", "top-right", "bottom-left", "bottom-right", "center-left",
    "center-right", "top-center", "bottom-center",
)  # fmt: skip
TRANSFER_MODES = ("hypervisor", "websocket")
CAPTURE_SOURCES = ("stdout", "stderr", "returncode", "all")
MAX_WAIT_DEPTH = 10
UNSUPPORTED_SETTINGS = ("collect_system_info", "forensic_logging")
"""adare's settings this runner does not do: ``true`` is refused, never ignored."""


@dataclass(frozen=True)
class Step:
    """One action of the playbook: its kind, its fields as written, where it is."""

    kind: str
    fields: Mapping[str, Any]
    line: int
    children: tuple[Step, ...] = ()
    """The actions of a ``loop`` or ``block``."""
    field_lines: Mapping[str, int] = field(default_factory=dict)
    """The line of each field (the step's own line for a short form)."""

    def line_of(self, key: str) -> int:
        return self.field_lines.get(key, self.line)

    @property
    def description(self) -> str:
        text = self.fields.get("description") or self.fields.get("name") or ""
        return str(text)


@dataclass(frozen=True)
class TestSpec:
    """One entry of ``tests:``: a guest test function with its parameters."""

    name: str
    function: str
    parameter: Mapping[str, Any]
    expect_to_fail: bool
    description: str
    timeout: float | None
    line: int


@dataclass(frozen=True)
class VariableSpec:
    """One entry of ``variables:`` as written (its value may be a template)."""

    name: str
    type: str
    value: Any
    timezone: str | None
    format: str | None
    line: int


@dataclass(frozen=True)
class Settings:
    idle: float = 0.1
    timeout: float | None = None
    screenshot: Mapping[str, Any] | None = None
    continue_on_test_failure: bool = False
    auto_pull_on_test_failure: bool = True
    enable_filesystem_diff: bool = False
    gui_execution_mode: str = "auto"


@dataclass(frozen=True)
class Playbook:
    path: Path
    actions: tuple[Step, ...]
    settings: Settings = field(default_factory=Settings)
    variables: tuple[VariableSpec, ...] = ()
    tests: Mapping[str, TestSpec] = field(default_factory=dict)

    @property
    def folder(self) -> Path:
        return self.path.parent


class _Reader:
    """Checks one file's YAML against the format; raises at the first problem."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def fail(self, message: str, line: int | None, name: str) -> PlaybookError:
        return PlaybookError(self.path, message, line=line, field=name)

    def mapping(self, value: Any, spec: Fields, where: str, line: int) -> Located:
        if value is None and not spec.required:
            value = Located()
            value.line, value.key_lines = line, {}
        if not isinstance(value, Located):
            raise self.fail(f"must be a mapping, got {_kind(value)}", line, where)
        for key in value:
            if key not in spec.allowed:
                raise self.fail(
                    f"unknown field{_suggest(key, spec.allowed)}", value.line_of(key),
                    _join(where, key),
                )  # fmt: skip
        for key in sorted(spec.required - set(value)):
            raise self.fail(f"missing required field {key!r}", value.line, where)
        for key, item in value.items():
            self.value(item, spec.allowed[key], _join(where, key), value.line_of(key))
        return value

    def value(self, item: Any, expected: Any, where: str, line: int) -> None:
        if isinstance(expected, Fields):
            self.mapping(item, expected, where, line)
        elif expected == "strategy":
            self.strategy(item, where, line)
        elif expected == "presence_list":
            self.presence_list(item, where, line)
        elif expected == "wait_condition":
            self.wait_condition(item, where, line, 0)
        elif expected == "actions":
            if not isinstance(item, list):
                raise self.fail(f"must be a list of actions, got {_kind(item)}", line, where)
        elif not isinstance(item, expected) or (isinstance(item, bool) and bool not in expected):
            names = " or ".join(_type_name(t) for t in expected)
            raise self.fail(f"must be {names}, got {_kind(item)} {_short(item)}", line, where)

    def strategy(self, item: Any, where: str, line: int) -> None:
        if not isinstance(item, Located) or len(item) != 1:
            raise self.fail(
                f"must be one of {', '.join(STRATEGIES)} (a mapping with one key)", line, where
            )
        (name,) = item
        if name not in STRATEGIES:
            raise self.fail(f"unknown strategy{_suggest(name, STRATEGIES)}", line, where)
        options = self.mapping(item[name], STRATEGIES[name], _join(where, name), line)
        if name == "ClosestToStrategy":
            modes = sum(
                [("x" in options and "y" in options), "text" in options, "image" in options]
            )
            if modes != 1 or (("x" in options) != ("y" in options)):
                raise self.fail(
                    "give exactly one of: x and y, text, image", item.line, _join(where, name)
                )

    def presence_list(self, item: Any, where: str, line: int) -> None:
        if not isinstance(item, list):
            raise self.fail(f"must be a list of exists/not_exists, got {_kind(item)}", line, where)
        for condition in item:
            keys = list(condition) if isinstance(condition, Located) else []
            if len(keys) != 1 or keys[0] not in ("exists", "not_exists"):
                raise self.fail("each entry is exists: {...} or not_exists: {...}", line, where)
            self.mapping(condition[keys[0]], PRESENCE, _join(where, keys[0]), condition.line)

    def wait_condition(self, item: Any, where: str, line: int, depth: int) -> None:
        if depth > MAX_WAIT_DEPTH:
            raise self.fail(f"nested deeper than {MAX_WAIT_DEPTH}", line, where)
        ops = ("exists", "not_exists", "all", "any", "not")
        if not isinstance(item, Located) or len(item) != 1:
            raise self.fail(f"must be a mapping with one of {', '.join(ops)}", line, where)
        (op,) = item
        if op not in ops:
            raise self.fail(f"unknown condition{_suggest(op, ops)}", item.line_of(op), where)
        inner = item[op]
        if op in ("exists", "not_exists"):
            self.target(inner, _join(where, op), item.line_of(op))
        elif op == "not":
            self.wait_condition(inner, _join(where, op), item.line_of(op), depth + 1)
        else:
            if not isinstance(inner, list) or not inner:
                raise self.fail("must be a non-empty list of conditions", item.line_of(op), where)
            for sub in inner:
                self.wait_condition(sub, _join(where, op), item.line_of(op), depth + 1)

    def target(self, item: Any, where: str, line: int) -> Located:
        target = self.mapping(item, TARGET, where, line)
        given = [k for k in ("image", "text", "position") if k in target]
        if len(given) != 1:
            raise self.fail("a target needs exactly one of image, text, position", line, where)
        position = target.get("position")
        if position is not None and (
            len(position) != 2 or not all(type(v) is int for v in position)
        ):
            raise self.fail("position must be [x, y] (two integers)", line, where)
        match = target.get("text_match")
        if match is not None:
            self.choice(match.get("mode", "substring"), TEXT_MATCH_MODES, where, match.line)
        offset = target.get("offset")
        if offset is not None:
            self.choice(offset.get("base", "center"), OFFSET_BASES, _join(where, "offset.base"),
                        offset.line)  # fmt: skip
        return target

    def choice(self, value: Any, choices: Sequence[str], where: str, line: int) -> None:
        if value not in choices:
            raise self.fail(
                f"{value!r} is not one of {', '.join(choices)}{_suggest(str(value), choices)}",
                line, where,
            )  # fmt: skip

    def condition(self, item: Located | None, where: str) -> None:
        if item is None:
            return
        given = [op for op in CONDITION_OPERATORS if op in item]
        if len(given) != 1:
            raise self.fail(
                f"give exactly one operator of {', '.join(CONDITION_OPERATORS)}", item.line, where
            )

    def steps(self, items: Any, where: str, line: int) -> tuple[Step, ...]:
        if not isinstance(items, list):
            raise self.fail(f"must be a list of actions, got {_kind(items)}", line, where)
        return tuple(self.step(item, f"{where}[{i}]", line) for i, item in enumerate(items))

    def step(self, item: Any, where: str, line: int) -> Step:
        if not isinstance(item, Located) or len(item) != 1:
            keys = ", ".join(item) if isinstance(item, Located) else _kind(item)
            at = item.line if isinstance(item, Located) else line
            raise self.fail(f"an action is a mapping with one action name, got {keys}", at, where)
        (kind,) = item
        at = item.line_of(kind)
        if kind not in ACTIONS:
            raise self.fail(f"unknown action{_suggest(kind, ACTIONS)}", at, _join(where, kind))
        raw = item[kind]
        if kind == "test" and isinstance(raw, str):
            raw = Located(name=raw)
            raw.line, raw.key_lines = at, {}
        fields = self.mapping(raw, ACTIONS[kind], _join(where, kind), at)
        self.check_step(kind, fields, _join(where, kind))
        children: tuple[Step, ...] = ()
        if kind in ("loop", "block"):
            children = self.steps(fields["actions"], _join(where, f"{kind}.actions"), at)
        return Step(kind, dict(fields), at, children, dict(fields.key_lines))

    def check_step(self, kind: str, fields: Located, where: str) -> None:
        line = fields.line
        if kind == "loop":
            if ("times" in fields) == ("items" in fields):
                raise self.fail("give exactly one of times, items", line, where)
            if "times" in fields and fields["times"] < 1:
                raise self.fail(f"times must be >= 1, got {fields['times']}", line, where)
        elif kind in ("click", "goto"):
            self.target(fields["target"], _join(where, "target"), fields.line_of("target"))
            if kind == "click":
                self.choice(fields.get("type", "left"), CLICK_TYPES, _join(where, "type"), line)
        elif kind == "drag":
            for end in ("src", "dst"):
                self.target(fields[end], _join(where, end), fields.line_of(end))
        elif kind == "scroll":
            self.choice(fields["direction"], SCROLL_DIRECTIONS, _join(where, "direction"), line)
        elif kind == "keyboard":
            if sum(k in fields for k in ("key", "text", "combination")) != 1:
                raise self.fail("give exactly one of key, text, combination", line, where)
        elif kind in ("stop", "continue"):
            self.condition(fields.get("condition"), _join(where, "condition"))
        elif kind == "command":
            capture = fields.get("capture")
            if capture is not None:
                self.choice(capture.get("source", "stdout"), CAPTURE_SOURCES,
                            _join(where, "capture.source"), capture.line)  # fmt: skip
        elif kind in ("pull", "pull_changed_files"):
            self.choice(fields.get("mode", "hypervisor"), TRANSFER_MODES, _join(where, "mode"),
                        line)  # fmt: skip
            if kind == "pull_changed_files" and not (
                fields.get("include_modified", True) or fields.get("include_added", True)
            ):
                raise self.fail("include_modified or include_added must be true", line, where)
            src = fields.get("src")
            if isinstance(src, list) and not all(isinstance(s, str) for s in src):
                raise self.fail("src must be a path or a list of paths", line, where)

    def tests(self, items: Any, line: int) -> dict[str, TestSpec]:
        tests: dict[str, TestSpec] = {}
        for i, item in enumerate(items or []):
            where = f"tests[{i}]"
            entry = self.mapping(item, TEST, where, line)
            name = entry["name"]
            if name in tests:
                raise self.fail(f"test {name!r} defined twice", entry.line, where)
            tests[name] = TestSpec(
                name, entry["function"], dict(entry.get("parameter") or {}),
                bool(entry.get("expect_to_fail", False)), str(entry.get("description", "")),
                entry.get("timeout"), entry.line,
            )  # fmt: skip
        return tests

    def variables(self, items: Any, line: int) -> tuple[VariableSpec, ...]:
        specs: list[VariableSpec] = []
        for name, item in (items or {}).items():
            where = f"variables.{name}"
            at = items.line_of(name)
            if not isinstance(item, Located):  # adare's short form: name: value
                specs.append(VariableSpec(name, "auto", item, None, None, at))
                continue
            entry = self.mapping(item, VARIABLE, where, at)
            kind = str(entry.get("type", "auto"))
            if kind != "auto":
                self.choice(kind, VARIABLE_TYPES, _join(where, "type"), entry.line_of("type"))
            specs.append(
                VariableSpec(
                    name, kind, entry["value"], entry.get("timezone"), entry.get("format"), at
                )
            )
        return tuple(specs)

    def settings(self, item: Any, line: int) -> Settings:
        entry = self.mapping(item, SETTINGS, "settings", line)
        mode = entry.get("gui_execution_mode", "auto")
        self.choice(mode, GUI_EXECUTION_MODES, "settings.gui_execution_mode", entry.line)
        for name in UNSUPPORTED_SETTINGS:
            if entry.get(name) is True:
                raise self.fail(
                    "not supported by pytest-adare (leave it out or set it false)",
                    entry.line_of(name), f"settings.{name}",
                )  # fmt: skip
        known = {k: v for k, v in entry.items() if k in Settings.__dataclass_fields__}
        return Settings(**known)


def check_test_references(reader: _Reader, steps: Sequence[Step], tests: Mapping[str, Any]) -> None:
    for step in steps:
        if step.kind == "test" and step.fields["name"] not in tests:
            name = step.fields["name"]
            known = f" (tests: {', '.join(sorted(tests))})" if tests and len(tests) <= 12 else ""
            raise reader.fail(
                f"no test named {name!r} in tests:{_suggest(name, tests)}{known}", step.line,
                "test",
            )  # fmt: skip
        check_test_references(reader, step.children, tests)


def parse_playbook(path: Path, document: Any) -> Playbook:
    """The playbook in ``document`` (YAML read from ``path`` by :func:`~.source.load_yaml`).

    :raise PlaybookError: the first thing that is not adare's format, with its line.
    """
    reader = _Reader(path)
    top = reader.mapping(document, PLAYBOOK, "playbook", 1)
    tests = reader.tests(top.get("tests"), top.line_of("tests"))
    steps = reader.steps(top["actions"], "actions", top.line_of("actions"))
    check_test_references(reader, steps, tests)
    for step in steps:
        if step.kind == "continue":
            raise reader.fail(
                "continue is only valid inside a loop or block", step.line, "continue"
            )
    return Playbook(
        path=path,
        actions=steps,
        settings=reader.settings(top.get("settings"), top.line_of("settings")),
        variables=reader.variables(top.get("variables"), top.line_of("variables")),
        tests=tests,
    )


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _suggest(name: str, known: Any) -> str:
    match = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return f": did you mean {match[0]}?" if match else ""


def _kind(value: Any) -> str:
    if value is None:
        return "nothing"
    return {dict: "a mapping", Located: "a mapping", list: "a list", str: "text",
            bool: "true/false", int: "a number", float: "a number"}.get(
        type(value), type(value).__name__
    )  # fmt: skip


def _type_name(kind: type) -> str:
    return {str: "text", int: "an integer", float: "a number", bool: "true/false",
            list: "a list", dict: "a mapping", type(None): "nothing"}.get(
        kind, kind.__name__
    )  # fmt: skip


def _short(value: Any) -> str:
    text = repr(value)
    return f"({text[:60]}...)" if len(text) > 60 else f"({text})"
