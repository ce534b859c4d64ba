"""``{{name}}`` templates and ``parser`` expressions, evaluated in Jinja2's sandbox.

An experiment is often someone else's file: nothing in it reaches ``eval``. Templates
are rendered by a :class:`jinja2.sandbox.SandboxedEnvironment` with undefined names an
error; a ``parser`` is compiled with its ``compile_expression``. Both see the
variables and a short list of safe globals (:data:`SAFE_GLOBALS`: ``len``, ``int``,
``float``, ``str``, ... and ``json.loads``/``json.dumps``, ``re.search`` and friends,
never the modules themselves, whose attributes reach ``codecs.open`` and the like).
Repetition (``'a' * N``, ``x ** N``) is bounded, so a template cannot eat the host's
memory.

adare's timestamp filters (``tolerance``, ``format``, ``localtime``, ``timezone``) are
there too (:mod:`pytest_adare.playbook.stamp_tag`).

A value that is exactly one ``{{ expression }}`` keeps the expression's type (a list
for ``items: "{{filenames}}"``, a number for ``"{{ counter + 1 }}"``), as adare's
variables do; any other text renders to text.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Mapping
from types import SimpleNamespace
from typing import Any

from jinja2 import StrictUndefined, TemplateError
from jinja2.sandbox import SandboxedEnvironment

from pytest_adare.playbook.stamp_tag import stamp_filters

MAX_REPEAT = 1_000_000
"""The longest string or list a ``*`` may make, the largest result of a ``**``."""
MAX_RENDERED = 4 * 1024 * 1024

_RE = SimpleNamespace(
    search=re.search, match=re.match, fullmatch=re.fullmatch, findall=re.findall,
    sub=re.sub, split=re.split, escape=re.escape, IGNORECASE=re.IGNORECASE,
    I=re.IGNORECASE, MULTILINE=re.MULTILINE, M=re.MULTILINE, DOTALL=re.DOTALL, S=re.DOTALL,
)  # fmt: skip
_JSON = SimpleNamespace(loads=json.loads, dumps=json.dumps)
SAFE_GLOBALS: dict[str, Any] = {
    "len": len, "int": int, "float": float, "str": str, "bool": bool, "list": list,
    "dict": dict, "tuple": tuple, "set": set, "min": min, "max": max, "sum": sum,
    "abs": abs, "round": round, "sorted": sorted, "enumerate": enumerate, "zip": zip,
    "json": _JSON, "re": _RE,
}  # fmt: skip
_SINGLE = re.compile(r"^\s*\{\{(?P<expr>(?:(?!\{\{|\}\}).)*)\}\}\s*$", re.DOTALL)
# Python's raw strings (r'\d+'), which Jinja's lexer lacks: rewritten as plain ones.
_RAW_STRING = re.compile(r"(?<![\w'\"])[rR](?P<q>['\"])(?P<body>(?:(?!(?P=q)).)*)(?P=q)")


class TemplateProblem(ValueError):
    """A template or expression that cannot be evaluated (the message says why)."""


class _Sandbox(SandboxedEnvironment):
    intercepted_binops = frozenset({"*", "**"})

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        if operator == "**":
            if isinstance(right, (int, float)) and abs(right) > 64 and abs(left) > 1:
                raise TemplateProblem(f"{left!r} ** {right!r} is too large")
            return left**right
        for seq, count in ((left, right), (right, left)):
            if isinstance(seq, (str, list, tuple)) and isinstance(count, int):
                if len(seq) * count > MAX_REPEAT:
                    raise TemplateProblem(f"repetition longer than {MAX_REPEAT}")
        return left * right


def _as_text(value: Any) -> Any:
    """adare's text of a value in a template: true/false, lists and mappings as JSON."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, dict)):
        return json.dumps(value)
    return value


_ENV = _Sandbox(
    undefined=StrictUndefined, autoescape=False, keep_trailing_newline=True, finalize=_as_text
)
_ENV.globals.update(SAFE_GLOBALS)
_ENV.filters.update(stamp_filters())  # adare's tolerance, format, localtime, timezone


@functools.lru_cache(maxsize=2048)
def _template(text: str) -> Any:
    return _ENV.from_string(text)


@functools.lru_cache(maxsize=1024)
def _expression(text: str) -> Callable[..., Any]:
    return _ENV.compile_expression(text, undefined_to_none=False)


def python_expression(text: str) -> str:
    """``text`` with Python raw strings made Jinja strings (``r'\\d'`` → ``'\\\\d'``)."""
    return _RAW_STRING.sub(
        lambda m: m["q"] + m["body"].replace("\\", "\\\\") + m["q"], text.strip()
    )


def has_template(value: Any) -> bool:
    return isinstance(value, str) and ("{{" in value or "{%" in value)


def render(value: Any, variables: Mapping[str, Any]) -> Any:
    """``value`` with every template in it filled in (lists and mappings throughout).

    :raise TemplateProblem: an undefined name, a syntax error, an operation the sandbox
        refuses.
    """
    if isinstance(value, str):
        return render_text(value, variables)
    if isinstance(value, list):
        return [render(item, variables) for item in value]
    if isinstance(value, dict):
        return {key: render(item, variables) for key, item in value.items()}
    return value


def render_text(text: str, variables: Mapping[str, Any]) -> Any:
    if not has_template(text):
        return text
    single = _SINGLE.match(text)
    try:
        if single is not None:
            result = _expression(single["expr"].strip())(**variables)
            if isinstance(result, StrictUndefined):
                str(result)  # raises UndefinedError naming it
            return result
        rendered = str(_template(text).render(**variables))
    except TemplateProblem:
        raise
    except TemplateError as error:
        raise TemplateProblem(_message(error, text)) from None
    except Exception as error:  # an operation inside the template failed
        raise TemplateProblem(f"{type(error).__name__}: {error} in {_quote(text)}") from None
    if len(rendered) > MAX_RENDERED:
        raise TemplateProblem(f"renders to more than {MAX_RENDERED} characters")
    return rendered


def evaluate(expression: str, variables: Mapping[str, Any]) -> Any:
    """The value of a ``parser`` expression (Python-like: ``int(output.strip())``).

    :raise TemplateProblem: it does not compile, names something undefined, or raises.
    """
    try:
        compiled = _expression(python_expression(expression))
        result = compiled(**variables)
        if isinstance(result, StrictUndefined):
            str(result)
        return result
    except TemplateProblem:
        raise
    except TemplateError as error:
        raise TemplateProblem(_message(error, expression)) from None
    except Exception as error:
        raise TemplateProblem(f"{type(error).__name__}: {error} in {_quote(expression)}") from None


def names_in(text: str) -> set[str]:
    """The variable names a template reads (for checking them before the run)."""
    # Deferred: only the checker needs it
    from jinja2 import meta

    try:
        return set(meta.find_undeclared_variables(_ENV.parse(text))) - set(SAFE_GLOBALS)
    except TemplateError:
        return set()


def syntax_problem(text: str) -> str | None:
    """Why ``text`` is not a template Jinja can compile, or None."""
    try:
        single = _SINGLE.match(text)
        if single is not None:
            _expression(single["expr"].strip())
        else:
            _template(text)
    except TemplateError as error:
        return _message(error, text)
    return None


def _message(error: TemplateError, text: str) -> str:
    return f"{str(error.message or error)[:200]} in {_quote(text)}"


def _quote(text: str) -> str:
    one = " ".join(text.split())
    return repr(one if len(one) <= 80 else one[:77] + "...")
