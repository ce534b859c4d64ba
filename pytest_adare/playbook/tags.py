"""adare's custom YAML tags in test parameters: ``!re``, ``!reALL``, ``!s``, ``!path`` and
``!timestamp``.

An adare playbook may give a test's expected value as a regular expression instead of
text: ``expected_value: !re '^\\d+\\.\\d+\\.\\d+$'`` (anchored at the start, as
``re.match``), or ``!reALL`` for any value, e.g. a CSV column that does not matter
(``entry: ['TXN003', '3.0.1', !re '\\d+\\.\\d{2}']``). ``!s`` and ``!path`` are plain text.
The loader makes a :class:`RegexTag` of each regex tag; before the test goes to the
guest, :func:`as_placeholders` turns each into a ``{{ regex_N_resolved }}`` placeholder
with a regex variable beside it, as adare's own runner does, so the guest's test
functions compare it through their placeholder rules (``adare_guest.placeholders``).

Templates inside a pattern are filled in with the variables, each value escaped
(``re.escape``) unless the variable is itself of type ``regex``: adare's rule. A value
that is only a regex variable (``'{{ email_regex }}'``) is compared as that regex too
(:func:`regex_variables_as_tags`).

``!timestamp`` is a timestamp compared as a time, not as text: ``!timestamp {timestamp:
'{{ deleted_at }}', tolerance: 5, timezone: UTC, format: '%Y-%m-%d %H:%M:%S'}`` (adare's
keys; ``timestamp_format_in_entry`` is ``format``, the found text's strptime format, and
``timestamp_format_comparison`` the strptime format of ``timestamp`` itself). It is the
:class:`~pytest_adare.playbook.stamp_tag.TimestampTag` the ``tolerance`` filter makes;
without a tolerance it is compared as text, as adare does.

>>> params, extra = as_placeholders({"v": RegexTag(r"^\\d+$")}, {}, frozenset())
>>> params, extra
({'v': '{{ regex_0_resolved }}'}, {'regex_0_resolved': {'value': '^\\\\d+$', 'type': 'regex'}})
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import yaml

from pytest_adare.playbook.stamp_tag import TimestampTag
from pytest_adare.playbook.templating import TemplateProblem, has_template, render_text

MAX_TAGS = 1000
"""Regex tags one test may hold (each becomes a variable sent to the guest)."""


@dataclass(frozen=True)
class RegexTag:
    """A ``!re`` (or ``!reALL``: ``.*``) value: ``pattern``, compared with ``re.match``."""

    pattern: str
    line: int = 0


def _scalar(loader: yaml.SafeLoader, node: yaml.Node) -> str:
    if not isinstance(node, yaml.ScalarNode):
        raise yaml.constructor.ConstructorError(
            None, None, f"{node.tag} takes a single text value", node.start_mark
        )
    return str(loader.construct_scalar(node))


_STAMP_KEYS = frozenset({
    "timestamp", "tolerance", "timezone", "format", "timestamp_format_in_entry",
    "timestamp_format_comparison", "localtime",
})  # fmt: skip


@dataclass(frozen=True)
class StampSource:
    """A ``!timestamp`` whose ``timestamp`` is given in a strptime format of its own
    (``timestamp_format_comparison``): read when the test runs, after its templates."""

    tag: TimestampTag
    source_format: str


def _timestamp(loader: yaml.SafeLoader, node: yaml.Node) -> TimestampTag | StampSource:
    def refuse(why: str) -> yaml.constructor.ConstructorError:
        return yaml.constructor.ConstructorError(None, None, f"!timestamp {why}", node.start_mark)

    if isinstance(node, yaml.ScalarNode):
        return TimestampTag(str(loader.construct_scalar(node)).strip())
    if not isinstance(node, yaml.MappingNode):
        raise refuse("takes a timestamp or a mapping with 'timestamp' and its options")
    fields = loader.construct_mapping(node)
    if "timestamp" not in fields and len(fields) == 1:  # adare: the first key may be it
        (first,) = fields
        if isinstance(first, str) and fields[first] is None:
            fields = {"timestamp": first}
    unknown = sorted(str(key) for key in set(fields) - _STAMP_KEYS)
    if unknown:
        raise refuse(f"has no key {', '.join(unknown)} (keys: {', '.join(sorted(_STAMP_KEYS))})")
    value = fields.get("timestamp")
    if not isinstance(value, (str, int, float)) or isinstance(value, bool) or not str(value):
        raise refuse("needs its 'timestamp', a text")
    tolerance = fields.get("tolerance")
    if tolerance is not None and (isinstance(tolerance, bool) or
                                  not isinstance(tolerance, (int, float))):  # fmt: skip
        raise refuse(f"tolerance must be a number of seconds, got {tolerance!r}")
    texts = {}
    for key in ("timezone", "format", "timestamp_format_in_entry", "timestamp_format_comparison"):
        if fields.get(key) is not None and not isinstance(fields[key], str):
            raise refuse(f"{key} must be a text, got {fields[key]!r}")
        texts[key] = fields.get(key)
    tag = TimestampTag(
        str(value).strip(),
        tolerance=None if tolerance is None else (-abs(float(tolerance)), abs(float(tolerance))),
        format=texts["format"] or texts["timestamp_format_in_entry"],
        localtime=bool(fields.get("localtime", False)),
        timezone=texts["timezone"],
    )
    source = texts["timestamp_format_comparison"]
    return tag if source is None else StampSource(tag, source)


def _resolved_stamp(item: TimestampTag | StampSource, variables: Mapping[str, Any]) -> TimestampTag:
    """``item`` with the templates of its timestamp filled in (and, for a
    :class:`StampSource`, the timestamp read in its own format), checked to be a time.

    :raise TemplateProblem: an undefined variable, or no timestamp."""
    tag = item.tag if isinstance(item, StampSource) else item
    value: Any = tag.value
    if has_template(value):
        value = render_text(value, variables)
        if isinstance(value, TimestampTag):  # '{{ t | timezone("UTC") }}': its options too
            merged = dataclasses.replace(
                value, **{f: getattr(tag, f) for f in ("tolerance", "format", "timezone")
                          if getattr(tag, f) is not None},
                localtime=value.localtime or tag.localtime,
            )  # fmt: skip
            value, tag = merged.value, merged
    text = str(value).strip()
    if isinstance(item, StampSource):
        try:
            text = datetime.strptime(text, item.source_format).isoformat()
        except ValueError:
            raise TemplateProblem(
                f"!timestamp {text!r} does not match timestamp_format_comparison "
                f"{item.source_format!r}"
            ) from None
    try:
        datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise TemplateProblem(f"!timestamp {text!r} is no ISO 8601 time") from None
    return dataclasses.replace(tag, value=text)


def register(loader: type[yaml.SafeLoader]) -> None:
    """Teach ``loader`` adare's tags (the others stay unknown: a YAML error with a line)."""

    def regex(loader: yaml.SafeLoader, node: yaml.Node) -> RegexTag:
        return RegexTag(_scalar(loader, node), node.start_mark.line + 1)

    def every(loader: yaml.SafeLoader, node: yaml.Node) -> RegexTag:
        return RegexTag(".*", node.start_mark.line + 1)

    def text(loader: yaml.SafeLoader, node: yaml.Node) -> str:
        return _scalar(loader, node)

    loader.add_constructor("!re", regex)
    loader.add_constructor("!reALL", every)
    loader.add_constructor("!s", text)
    loader.add_constructor("!path", text)
    loader.add_constructor("!timestamp", _timestamp)


_ONE_NAME = re.compile(r"^\{\{\s*([A-Za-z_]\w*)\s*\}\}$")


def regex_variables_as_tags(
    value: Any, variables: Mapping[str, Any], regex_names: frozenset[str]
) -> Any:
    """``value`` with each text that is just one regex variable (``'{{ email_regex }}'``)
    made a :class:`RegexTag` of its pattern: adare compares such a value as a regex,
    not as the pattern's text (its test_csv experiment does this in CSV rows)."""
    if isinstance(value, str):
        named = _ONE_NAME.match(value.strip())
        if named and named[1] in regex_names and named[1] in variables:
            return RegexTag(str(variables[named[1]]))
        return value
    if isinstance(value, list):
        return [regex_variables_as_tags(item, variables, regex_names) for item in value]
    if isinstance(value, dict):
        return {k: regex_variables_as_tags(v, variables, regex_names) for k, v in value.items()}
    return value


def _escaped(variables: Mapping[str, Any], regex_names: frozenset[str]) -> dict[str, Any]:
    return {
        name: value if name in regex_names or not isinstance(value, (str, int, float)) else
        re.escape(str(value))
        for name, value in variables.items()
    }  # fmt: skip


def as_placeholders(
    value: Any, variables: Mapping[str, Any], regex_names: frozenset[str]
) -> tuple[Any, dict[str, dict[str, Any]]]:
    """``value`` with each :class:`RegexTag` (and each
    :class:`~pytest_adare.playbook.stamp_tag.TimestampTag` with a tolerance) replaced by
    a placeholder, and the variables those placeholders name (``{"value": pattern,
    "type": "regex"}``, a timestamp's metadata).

    :raise TemplateProblem: a template in a pattern names an undefined variable, the
        filled-in pattern is no regular expression, or there are too many tags.
    """
    extra: dict[str, dict[str, Any]] = {}
    escaped: dict[str, Any] | None = None

    def walk(item: Any) -> Any:
        nonlocal escaped
        if isinstance(item, RegexTag):
            pattern = item.pattern
            if has_template(pattern):
                escaped = escaped if escaped is not None else _escaped(variables, regex_names)
                pattern = str(render_text(pattern, escaped))
            try:
                re.compile(pattern)
            except re.error as error:
                problem = f"!re {pattern!r} is no regular expression: {error}"
                raise TemplateProblem(problem) from None
            if len(extra) >= MAX_TAGS:
                raise TemplateProblem(f"more than {MAX_TAGS} !re values in one test")
            name = f"regex_{len(extra)}_resolved"
            extra[name] = {"value": pattern, "type": "regex"}
            return f"{{{{ {name} }}}}"
        if isinstance(item, (StampSource, TimestampTag)):
            item = _resolved_stamp(item, variables)
        if isinstance(item, TimestampTag):
            if item.tolerance is None:  # adare: without a tolerance, compared as text
                return item.text()
            if len(extra) >= MAX_TAGS:
                raise TemplateProblem(f"more than {MAX_TAGS} tagged values in one test")
            name = f"timestamp_{len(extra)}_resolved"
            extra[name] = item.metadata()
            return f"{{{{ {name} }}}}"
        if isinstance(item, list):
            return [walk(entry) for entry in item]
        if isinstance(item, dict):
            return {key: walk(entry) for key, entry in item.items()}
        return item

    return walk(value), extra
