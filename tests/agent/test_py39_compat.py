"""The guest agent's Python 3.9 code paths, taken on the host's Python.

The guest's python3 may be 3.9 (``PYTHON_FLOOR``); where the agent does something
else on 3.9 than on newer Pythons, the 3.9 path must give the same answers. Here
both paths run side by side on the host; tests/integration/test_python39_guest.py
runs the whole bundle under a real 3.9.
"""

from __future__ import annotations

import datetime
import fcntl
import platform
import re
import typing
from pathlib import Path
from typing import Any, Literal, Union

import pytest

from adare_guest import fs_listing, iso8601, placeholders, system_info, tool_params
from adare_guest.config import AgentConfig
from adare_guest.server import default_groups
from adare_guest.tool_params import ParamError, evaluate_annotation
from adare_guest.tools.base import AgentState, BoundTool
from tests.agent import iso_corpus

# JSON values of every kind a call's params can hold.
SAMPLES: list[Any] = [
    None, True, 0, -3, 2**70, 1.5, float("nan"), "", "text", [], ["a"], [1, 2], {},
    {"k": "v"}, {"k": 1},
]  # fmt: skip


@pytest.fixture
def union_operator_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Take the path of a Python without ``X | Y`` of types (3.9)."""
    monkeypatch.setattr(tool_params, "_NATIVE_UNION_OPERATOR", False)


@pytest.mark.usefixtures("union_operator_missing")
def test_bar_unions_become_typing_unions_without_the_union_operator() -> None:
    namespace = {"Any": Any, "Literal": Literal}
    optional = evaluate_annotation("str | None", namespace)
    assert typing.get_origin(optional) is Union  # not types.UnionType: no ``|`` evaluated
    assert optional == (str | None)
    nested = evaluate_annotation("list[int] | dict[str, Any] | None", namespace)
    assert typing.get_args(nested) == (list[int], dict[str, Any], type(None))
    inner = evaluate_annotation("list[str | int]", namespace)
    assert typing.get_origin(typing.get_args(inner)[0]) is Union and inner == list[str | int]
    literal = evaluate_annotation("Literal['a', 'b'] | None", namespace)
    assert literal == (Literal["a", "b"] | None)
    assert evaluate_annotation(" float ", namespace) is float
    assert evaluate_annotation(int, namespace) is int
    with pytest.raises(NameError):
        evaluate_annotation("Missing | None", namespace)


def _tools() -> dict[str, BoundTool]:
    found: dict[str, BoundTool] = {}
    for factory in default_groups():
        found.update(factory(AgentConfig(), AgentState()).tools())
    return found


def _verdicts(tool: BoundTool) -> list[tuple[str, Any, str]]:
    """Each sample as the value of each param: the validated value or the error text."""
    answers = []
    for name in tool.params:
        for value in SAMPLES:
            try:
                answers.append((name, repr(value), repr(tool.validate({name: value})[name])))
            except ParamError as exc:
                answers.append((name, repr(value), str(exc)))
    return answers


def test_every_tool_describes_and_validates_its_params_alike_on_both_paths(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    native = _tools()
    monkeypatch.setattr(tool_params, "_NATIVE_UNION_OPERATOR", False)
    fallback = _tools()
    assert sorted(fallback) == sorted(native)
    unions = 0
    for name, tool in native.items():
        assert fallback[name].describe() == tool.describe(), name
        assert _verdicts(fallback[name]) == _verdicts(tool), name
        unions += sum(" or " in p["type"] for p in tool.describe()["params"].values())
    assert unions > 10  # the comparison covers many ``X | None`` params


def test_zip_strict_raises_what_zip_strict_raises() -> None:
    assert list(placeholders._zip_strict("ab", [1, 2])) == list(zip("ab", [1, 2], strict=True))
    for first, second in (("ab", [1]), ("a", [1, 2])):
        with pytest.raises(ValueError) as ours:
            list(placeholders._zip_strict(first, second))
        with pytest.raises(ValueError) as builtin:
            list(zip(first, second, strict=True))
        assert str(ours.value) == str(builtin.value)


def test_the_pipe_size_request_is_linuxs_f_setpipe_sz() -> None:
    assert fs_listing._F_SETPIPE_SZ == fcntl.F_SETPIPE_SZ


OS_RELEASE = r"""# a comment
NAME="Debian GNU/Linux"
ID=debian
VERSION_ID='11'
PRETTY_NAME="Debian \"bullseye\" \$HOME \\ \`x\`"
NOT A FIELD
UNTERMINATED="open
"""


def test_os_release_is_parsed_like_platform_parses_it(tmp_path: Path) -> None:
    file = tmp_path / "os-release"
    file.write_text(OS_RELEASE)
    assert system_info.read_os_release([str(tmp_path / "missing"), str(file)]) == {
        "NAME": "Debian GNU/Linux",
        "ID": "debian",
        "VERSION_ID": "11",
        "PRETTY_NAME": 'Debian "bullseye" $HOME \\ `x`',
        "UNTERMINATED": '"open',
    }
    file.write_text("VERSION_ID=1\n")
    assert system_info.read_os_release([str(file)]) == {
        "NAME": "Linux", "ID": "linux", "PRETTY_NAME": "Linux", "VERSION_ID": "1"
    }  # fmt: skip


def test_the_hosts_os_release_reads_the_same_as_platform_reads_it() -> None:
    try:
        expected = platform.freedesktop_os_release()
    except OSError:
        pytest.skip("the host has no os-release file")
    assert system_info.read_os_release() == expected


def test_without_platforms_reader_system_info_reads_os_release_itself(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    file = tmp_path / "os-release"
    file.write_text("ID=fallback\n")
    monkeypatch.delattr(platform, "freedesktop_os_release")
    monkeypatch.setattr(system_info, "OS_RELEASE_FILES", (str(file),))
    monkeypatch.setattr(system_info.read_os_release, "__defaults__", ((str(file),),))
    assert system_info._os_release()["ID"] == "fallback"
    file.unlink()
    assert system_info._os_release() == {}
    with pytest.raises(OSError, match="Unable to read files"):
        system_info.read_os_release([str(file)])


# What Python 3.9's ``fromisoformat`` reads: ``isoformat()``'s own output.
NARROW_ISO = re.compile(
    r"\d{4}-\d{2}-\d{2}(?:.\d{2}(?::\d{2}(?::\d{2}(?:\.\d{6})?)?)?"
    r"(?:[+-]\d{2}:\d{2}(?::\d{2}(?:\.\d{6})?)?)?)?",
    re.ASCII | re.DOTALL,
)


def _native_iso(text: str) -> str | None:
    try:
        return datetime.datetime.fromisoformat(text).isoformat()
    except ValueError:
        return None


def _rewritten_iso(text: str) -> str | None:
    """``text`` read the 3.9 way: rewritten into the narrow form, then read."""
    try:
        rewritten = iso8601.extended_form(text)
    except ValueError:  # a week that does not exist
        return None
    if rewritten is None:
        return None
    assert NARROW_ISO.fullmatch(rewritten), (text, rewritten)
    return _native_iso(rewritten)


def test_well_formed_iso_8601_reads_as_python_3_11_reads_it() -> None:
    wrong = [(t, _native_iso(t), _rewritten_iso(t)) for t in iso_corpus.WELL_FORMED
             if _rewritten_iso(t) != _native_iso(t)]  # fmt: skip
    assert not wrong, wrong[:10]
    assert sum(_native_iso(t) is not None for t in iso_corpus.WELL_FORMED) > 4000


def test_malformed_iso_8601_is_never_read_where_python_3_11_refuses_it() -> None:
    wrong = [(t, _native_iso(t), _rewritten_iso(t)) for t in iso_corpus.MALFORMED
             if _rewritten_iso(t) not in (None, _native_iso(t))]  # fmt: skip
    assert not wrong, wrong[:10]


def test_python_3_11_reads_iso_8601_itself() -> None:
    assert iso8601._NATIVE
    for text in ("2024-W18-3T10:00:03,5+0100", "2024-05-01T10:00:03"):
        assert iso8601.fromisoformat(text) == datetime.datetime.fromisoformat(text)
    with pytest.raises(ValueError):
        iso8601.fromisoformat("2024-05-01T25:00")
