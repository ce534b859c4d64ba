"""adare's variables: typed values, made of other variables, and the automatic ones.

``variables:`` entries are typed (string, path, integer, float, boolean, list, dict,
regex, timestamp with ``timezone`` and ``format``) and may be templates of each other
in any order: :func:`resolve_declared` fills them in until none is left, and names a
cycle or an undefined name. ``save_variable`` and short-form entries infer their type
as adare does (:func:`infer`: ``"123"`` is 123, ``"true"`` is True).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta, timezone, tzinfo
from typing import Any

from pytest_adare.playbook.errors import PlaybookError
from pytest_adare.playbook.schema import Playbook, VariableSpec
from pytest_adare.playbook.templating import TemplateProblem, has_template, names_in, render

LOOP_VARIABLES = ("index", "total", "item")
_INT = re.compile(r"^[+-]?\d+$")
_FLOAT = re.compile(r"^[+-]?(\d+\.\d*|\.\d+|\d+(\.\d*)?[eE][+-]?\d+)$")
_OFFSET = re.compile(r"^(?P<sign>[+-])(?P<h>\d{2}):?(?P<m>\d{2})$")


def infer(value: Any) -> Any:
    """adare's automatic typing of a text value: number, true/false, else the text."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    if _INT.match(text):
        return int(text)
    if _FLOAT.match(text):
        return float(text)
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    return value


def coerce(spec: VariableSpec, value: Any) -> Any:
    """``value`` (rendered) as ``spec``'s type.

    :raise ValueError: not a value of that type (the message says what it got).
    """
    kind = spec.type
    if kind == "auto":
        return infer(value)
    if kind in ("string", "path"):
        if isinstance(value, (dict, list)):
            raise ValueError(f"a {kind} is text, got a {type(value).__name__}")
        return str(value)
    if kind in ("integer", "int"):
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise ValueError(f"an integer, got {value!r}")
        return int(str(value).strip())
    if kind == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise ValueError(f"a number, got {value!r}")
        return float(str(value).strip())
    if kind in ("boolean", "bool"):
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            return value.strip().lower() == "true"
        raise ValueError(f"true or false, got {value!r}")
    if kind == "list":
        if not isinstance(value, list):
            raise ValueError(f"a list, got {value!r}")
        return value
    if kind == "dict":
        if not isinstance(value, dict):
            raise ValueError(f"a mapping, got {value!r}")
        return value
    if kind == "regex":
        re.compile(str(value))
        return str(value)
    if kind == "timestamp":
        return timestamp(value, spec.timezone, spec.format)
    raise ValueError(f"unknown type {kind!r}")


def zone(name: str) -> tzinfo:
    """``UTC``, ``+04:00`` or an IANA name as a time zone; :raise ValueError: none of them."""
    if name.upper() in ("UTC", "Z"):
        return timezone.utc
    offset = _OFFSET.match(name)
    if offset:
        delta = timedelta(hours=int(offset["h"]), minutes=int(offset["m"]))
        return timezone(-delta if offset["sign"] == "-" else delta)
    # Deferred: only named zones need the tz database
    from zoneinfo import ZoneInfo

    try:
        return ZoneInfo(name)
    except Exception:
        raise ValueError(f"unknown time zone {name!r}") from None


def timestamp(value: Any, zone_name: str | None, fmt: str | None) -> str:
    """A timestamp variable's value as ISO 8601 text (what guest test functions read).

    ``value``: ISO text (``2025-01-15 10:30:00`` too), else text in ``fmt``
    (strptime), or seconds since the epoch; a naive time is in ``zone_name`` (default
    UTC). adare's ``format`` is how the time is shown and compared, so ISO text is
    read whatever it says.
    """
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        moment = datetime.fromtimestamp(float(value), timezone.utc)
    elif isinstance(value, str):
        text = value.strip()
        try:
            moment = datetime.fromisoformat(text)
        except ValueError:
            if not fmt:
                raise
            moment = datetime.strptime(text, fmt)
    elif isinstance(value, datetime):
        moment = value
    else:
        raise ValueError(f"a time (ISO text or epoch seconds), got {value!r}")
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=zone(zone_name) if zone_name else timezone.utc)
    elif zone_name:
        moment = moment.astimezone(zone(zone_name))
    return moment.isoformat()


def resolve_declared(
    playbook: Playbook, base: Mapping[str, Any], overrides: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """``base`` (the automatic variables) plus every declared variable, filled in.

    ``overrides`` (``run_playbook(variables=...)``) replace declared values of the same
    name and may add others.

    :raise PlaybookError: a cycle, an undefined name, or a value not of its type.
    """
    values: dict[str, Any] = dict(base)
    pending = {spec.name: spec for spec in playbook.variables}
    for name, value in (overrides or {}).items():
        pending.pop(name, None)
        values[name] = value
    while pending:
        progress = False
        for name, spec in list(pending.items()):
            needed = _names(spec.value) - {name}
            if needed & set(pending):
                continue
            values[name] = _typed(playbook, spec, values)
            del pending[name]
            progress = True
        if not progress:
            spec = next(iter(pending.values()))
            cycle = ", ".join(sorted(pending))
            raise PlaybookError(
                playbook.path, f"variables made of each other, in a cycle: {cycle}",
                line=spec.line, field=f"variables.{spec.name}",
            )  # fmt: skip
    return values


def _typed(playbook: Playbook, spec: VariableSpec, values: Mapping[str, Any]) -> Any:
    where = f"variables.{spec.name}"
    try:
        rendered = render(spec.value, values)
    except TemplateProblem as error:
        raise PlaybookError(playbook.path, str(error), line=spec.line, field=where) from None
    try:
        return coerce(spec, rendered)
    except ValueError as error:
        raise PlaybookError(
            playbook.path, f"not a {spec.type}: {error}", line=spec.line, field=where
        ) from None


def _names(value: Any) -> set[str]:
    if isinstance(value, str):
        return names_in(value) if has_template(value) else set()
    if isinstance(value, list):
        return set().union(*(_names(v) for v in value)) if value else set()
    if isinstance(value, dict):
        return set().union(*(_names(v) for v in value.values())) if value else set()
    return set()


def template_names(value: Any) -> set[str]:
    """Every name the templates in ``value`` read."""
    return _names(value)


def describe(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def shared_variables(run_dir: str, windows: bool) -> dict[str, str]:
    """adare's shared-folder variables: the experiment's ``shared/`` is pushed there."""
    sep = "\\" if windows else "/"
    root = run_dir.rstrip("/\\").rsplit(sep, 1)[0] or sep
    shared = f"{root}{sep}shared"
    values = {
        "adare_shared": shared,
        "adare_shared_tools": f"{shared}{sep}tools",
        "adare_shared_data": f"{shared}{sep}data",
        "adare_project_shared": f"{root}{sep}project_shared",
        "adare_project_shared_tools": f"{root}{sep}project_shared{sep}tools",
        "adare_project_shared_data": f"{root}{sep}project_shared{sep}data",
    }
    if windows:
        values["adare_system_drive"] = "C:"
    else:
        values["adare_root_dir"] = "/"
    return values


def created_names(steps: Sequence[Any]) -> set[str]:
    """Names the steps create (save_variable, capture, save_timestamp, snapshots,
    loop item variables), for the check of names before the run."""
    names: set[str] = set()
    for step in steps:
        fields = step.fields
        for key in ("variable",) if step.kind in ("save_timestamp", "snapshot_filesystem") else ():
            names.add(str(fields[key]))
        if step.kind == "save_variable":
            names.add(str(fields["name"]))
        if step.kind == "command" and fields.get("capture"):
            names.add(str(fields["capture"]["variable"]))
        if step.kind == "loop":
            names.update(LOOP_VARIABLES)
            if fields.get("item_var"):
                names.add(str(fields["item_var"]))
        names |= created_names(step.children)
    return names
