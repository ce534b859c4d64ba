"""Checking a tool call's params against the tool's signature (also on Python 3.9).

A tool's keyword-only parameters and their annotations are the schema: JSON values
are checked against ``bool``, ``int`` (64-bit), ``float`` (ints widened, finite),
``str``, ``list[X]``, ``dict[str, X]``, ``X | None``, ``Literal[...]`` and ``Any``.

The annotations are strings (``from __future__ import annotations``), and the
guest's Python may be 3.9, which cannot evaluate ``X | Y`` of types:
:func:`evaluate_annotation` rewrites those into ``typing.Union`` first. Standard
library only; :mod:`adare_guest.tools.base` binds tools with it.

>>> def tool(self, ctx, *, path: str, mode: int | None = None): ...
>>> specs, _ = signature_params("t", tool)
>>> validate_params("t", specs, False, {"path": "/x", "mode": None})
{'path': '/x', 'mode': None}
>>> validate_params("t", specs, False, {"path": 1})
Traceback (most recent call last):
...
adare_guest.tool_params.ParamError: param 'path' of tool 't' must be a string, got int 1
"""

from __future__ import annotations

import ast
import inspect
import math
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, Union

MAX_TIMEOUT = 7 * 24 * 3600.0
"""Largest ``timeout`` param a call may give (one week); larger ones are refused."""
INT_PARAM_BITS = 63
"""Integer params must fit a signed 64-bit integer (seek offsets, sizes, modes)."""


class ParamError(ValueError):
    """The params of a tool call do not fit the tool's signature."""


@dataclass(frozen=True)
class ParamSpec:
    """One parameter of a tool."""

    name: str
    annotation: Any
    required: bool


def signature_params(name: str, func: Any) -> tuple[dict[str, ParamSpec], bool]:
    """The params of tool ``name`` implemented by ``func(self, ctx, *, ...)``, and
    whether it takes ``**kwargs`` (unknown params are then passed through).

    :raise TypeError: ``func`` takes ``*args``.
    """
    hints = type_hints(func)
    params: dict[str, ParamSpec] = {}
    accepts_any = False
    for param in list(inspect.signature(func).parameters.values())[2:]:  # self, ctx
        if param.kind is inspect.Parameter.VAR_KEYWORD:
            accepts_any = True
            continue
        if param.kind is inspect.Parameter.VAR_POSITIONAL:
            raise TypeError(f"tool {name!r} must not take *args")
        params[param.name] = ParamSpec(
            param.name, hints.get(param.name, Any), param.default is inspect.Parameter.empty
        )
    return params, accepts_any


def validate_params(
    tool: str, specs: Mapping[str, ParamSpec], accepts_any: bool, params: Mapping[str, Any]
) -> dict[str, Any]:
    """Check a call's ``params`` against ``specs``; return them (ints widened to float).

    :raise ParamError: unknown, missing or wrongly typed params (message names them).
    """
    unknown = sorted(set(params) - set(specs))
    if unknown and not accepts_any:
        allowed = ", ".join(specs) or "none"
        raise ParamError(f"unknown param(s) {unknown} for tool {tool!r} (allowed: {allowed})")
    missing = sorted(p.name for p in specs.values() if p.required and p.name not in params)
    if missing:
        raise ParamError(f"missing required param(s) {missing} for tool {tool!r}")
    checked = dict(params)
    for key, value in params.items():
        spec = specs.get(key)
        if spec is None:
            continue
        ok, converted = check_value(value, spec.annotation)
        if not ok:
            raise ParamError(
                f"param {key!r} of tool {tool!r} must be {describe_type(spec.annotation)}, "
                f"got {type(value).__name__} {_short(value)}"
            )
        if key == "timeout" and isinstance(converted, float) and converted > MAX_TIMEOUT:
            raise ParamError(
                f"param 'timeout' of tool {tool!r} must be at most {MAX_TIMEOUT:g} s, "
                f"got {converted:g}"
            )
        checked[key] = converted
    return checked


_UNION_NAME = "__adare_Union__"
# Not a ``sys.version_info`` test, so that type checkers check the 3.9 path too.
_NATIVE_UNION_OPERATOR = hasattr(types, "UnionType")


def type_hints(func: Any) -> dict[str, Any]:
    if _NATIVE_UNION_OPERATOR:
        try:
            return typing.get_type_hints(func)
        except NameError:
            pass
    # Some annotation (typically ``ctx``'s, imported under TYPE_CHECKING) does not
    # resolve at runtime, or the Python (3.9) cannot evaluate ``X | Y`` of types:
    # resolve the annotations one by one, unknown ones mean Any.
    hints: dict[str, Any] = {}
    for key, text in getattr(func, "__annotations__", {}).items():
        try:
            hints[key] = evaluate_annotation(text, func.__globals__)
        except Exception:
            hints[key] = Any
    return hints


class _UnionOfBitOr(ast.NodeTransformer):
    """Rewrites ``X | Y`` into ``Union[X, Y]`` (nested ones flatten in ``Union``)."""

    def visit_BinOp(self, node: ast.BinOp) -> ast.expr:
        self.generic_visit(node)
        if not isinstance(node.op, ast.BitOr):
            return node
        union = ast.Name(id=_UNION_NAME, ctx=ast.Load())
        pair = ast.Tuple(elts=[node.left, node.right], ctx=ast.Load())
        return ast.Subscript(value=union, slice=pair, ctx=ast.Load())


def evaluate_annotation(annotation: object, namespace: dict[str, Any]) -> Any:
    """The value of a (string) annotation in ``namespace``, as ``eval`` gives it.

    Python 3.9 cannot evaluate ``X | Y`` of types (PEP 604 came in 3.10), which
    ``from __future__ import annotations`` lets a 3.9 module write: there the ``|``
    operators become ``typing.Union[X, Y]``, which :func:`check_value` and
    :func:`describe_type` treat like ``X | Y``. A non-string annotation is returned as is.

    :raise Exception: whatever evaluating the annotation raises (e.g. NameError).
    """
    if not isinstance(annotation, str):
        return annotation
    if _NATIVE_UNION_OPERATOR:
        return eval(annotation, namespace)
    tree = _UnionOfBitOr().visit(ast.parse(annotation.strip(), mode="eval"))
    code = compile(ast.fix_missing_locations(tree), "<annotation>", "eval")
    return eval(code, namespace, {_UNION_NAME: Union})


# --------------------------------------------------------------------------- type checks

# ``X | Y`` of types is a ``types.UnionType`` (Python 3.10 and later), ``Union[X, Y]`` a
# ``typing.Union`` (also what :func:`evaluate_annotation` makes of ``X | Y`` on 3.9).
_UNION_ORIGINS = (Union, getattr(types, "UnionType", Union))


def check_value(value: Any, annotation: Any) -> tuple[bool, Any]:
    """Does the JSON ``value`` fit ``annotation``? Returns (ok, value widened to float)."""
    if annotation is Any or annotation is object:
        return True, value
    origin = typing.get_origin(annotation)
    if origin in _UNION_ORIGINS:
        for option in typing.get_args(annotation):
            ok, converted = check_value(value, option)
            if ok:
                return True, converted
        return False, value
    if origin is Literal:
        return value in typing.get_args(annotation), value
    if annotation is type(None):
        return value is None, value
    if annotation is bool:
        return isinstance(value, bool), value
    if annotation is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
        return ok and value.bit_length() <= INT_PARAM_BITS, value
    if annotation is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            try:
                number = float(value)
            except OverflowError:  # an integer of hundreds of digits
                return False, value
            return math.isfinite(number), number
        return False, value
    if annotation is str:
        return isinstance(value, str), value
    if annotation is list or origin is list:
        if not isinstance(value, list):
            return False, value
        args = typing.get_args(annotation)
        if args:
            checked = [check_value(item, args[0]) for item in value]
            if not all(ok for ok, _ in checked):
                return False, value
            return True, [item for _, item in checked]
        return True, value
    if annotation is dict or origin is dict:
        if not isinstance(value, dict):
            return False, value
        args = typing.get_args(annotation)
        if args and not all(check_value(v, args[1])[0] for v in value.values()):
            return False, value
        return True, value
    return isinstance(value, annotation) if isinstance(annotation, type) else True, value


def describe_type(annotation: Any) -> str:
    if annotation is Any:
        return "any value"
    origin = typing.get_origin(annotation)
    if origin in _UNION_ORIGINS:
        return " or ".join(describe_type(a) for a in typing.get_args(annotation))
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(annotation))
    names = {
        bool: "a boolean",
        int: "an integer",
        float: "a number",
        str: "a string",
        list: "a list",
        dict: "an object",
        type(None): "null",
    }
    if origin in (list, dict):
        return names[origin]
    return names.get(annotation, getattr(annotation, "__name__", str(annotation)))


def _short(value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"of {value.bit_length()} bits"
    if isinstance(value, (list, dict)):
        return f"of {len(value)} items"
    text = repr(value[:60] if isinstance(value, str) else value)
    return text if len(text) <= 60 else text[:57] + "..."
