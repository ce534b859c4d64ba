"""Write the option reference of docs/ from the one option definition.

The option table and the marker arguments in docs/plugin.md and the ``launch()``
signature in docs/runtime.md are made here from ``VMOptions``' fields (their
``OptionInfo``) and the plugin's own option specs, between ``<!-- NAME:begin -->`` and
``<!-- NAME:end -->``; ``tests/plugin/test_option_docs.py`` fails when the files are
not what this script writes.

    python scripts/option_docs.py          # rewrite the blocks
    python scripts/option_docs.py --check  # exit 1 if a block is out of date
"""

from __future__ import annotations

import argparse
import inspect
import re
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

from pytest_adare.launch import launch
from pytest_adare.plugin.options import MARKER_KEYS, OptionSpec, option_specs
from pytest_adare.vm_options import OptionField, option_fields

REPO = Path(__file__).resolve().parents[1]

PLUGIN_MARKER_ARGUMENTS = {
    "image": "the image (as `--adare-vm`): a test whose VM differs from the session's gets "
    "its own VM, shared with other tests asking for the same",
    "images": "a list of images (short names or specs): the test runs once per image; narrows "
    "the session's `--adare-vm` list (an image outside it is a collection error) or, with none "
    "on the command line, sets it ([matrix](matrix.md))",
    "gui": "`True` needs an image with a desktop; `\"auto\"`/`\"agent\"`/`\"host\"` needs "
    "one and picks the GUI backend (as `--adare-gui`)",
    "os": '`"linux"` or `"windows"`: needs that guest OS',
    "isolation": "how this test's VM is cleaned (as `--adare-isolation`); alone it shares the "
    "session VM",
}


def _what(help_text: str) -> str:
    """A help text without its ``(default: ...)`` tail (the docs have a column for it)."""
    return re.sub(r" \(default: .*\)$", "", help_text)


def _marker_name(spec: OptionSpec) -> str:
    name = "image" if spec.name == "vm" else spec.name
    return f"`{name}=`" if name in MARKER_KEYS else ""


def option_table() -> str:
    """The flags and ini keys of docs/plugin.md."""
    rows = ["| flag | ini key | marker | values | default |", "|---|---|---|---|---|"]
    for spec in option_specs():
        cells = (f"`{spec.flag}`", f"`{spec.ini}`", _marker_name(spec), spec.values,
                 spec.doc_default)  # fmt: skip
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def _vm_marker_options() -> dict[str, OptionField]:
    return {o.name: o for o in option_fields() if o.exposed("marker")}


def marker_arguments() -> str:
    """The ``adare_vm`` arguments of docs/plugin.md."""
    vm_options = _vm_marker_options()
    rows = ["| argument | what |", "|---|---|"]
    for key in MARKER_KEYS:
        if key in PLUGIN_MARKER_ARGUMENTS:
            text = PLUGIN_MARKER_ARGUMENTS[key]
        else:
            option = vm_options[key]
            flag = f" (as `--adare-{key.replace('_', '-')}`)" if option.exposed("cli") else ""
            default = option.info.doc_default or f"`{option.default!r}`"
            text = f"{_what(option.info.help)}{flag}; {option.values}; default: {default}"
        rows.append(f"| `{key}` | {text} |")
    return "\n".join(rows)


def launch_signature() -> str:
    """The ``launch()`` signature and keywords of docs/runtime.md."""
    own = [
        f"{p.name}={'<stderr>' if callable(p.default) else repr(p.default)}"
        if p.default is not inspect.Parameter.empty else p.name
        for p in inspect.signature(launch).parameters.values()
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    ]  # fmt: skip
    options = [o for o in option_fields() if o.exposed("launch")]
    keywords = [f"{o.field}={o.default!r}" for o in options]
    signature = f"launch({own[0]}, *, {', '.join(keywords + own[1:])})"
    rows = [
        "```text",
        textwrap.fill(signature, 88, subsequent_indent="       ", break_on_hyphens=False),
        "```",
        "",
        "| keyword | default | what |",
        "|---|---|---|",
    ]
    for o in options:
        default = o.info.doc_default or f"`{o.default!r}`"
        rows.append(f"| `{o.field}` | {default} | {_what(o.info.help)} |")
    return "\n".join(rows)


BLOCKS: dict[str, dict[str, Callable[[], str]]] = {
    "docs/plugin.md": {"options": option_table, "marker": marker_arguments},
    "docs/runtime.md": {"launch": launch_signature},
}


def render(text: str, blocks: dict[str, Callable[[], str]], path: str) -> str:
    """``text`` with each named block replaced by what its function makes."""
    for name, make in blocks.items():
        begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
        if text.count(begin) != 1 or text.count(end) != 1:
            raise SystemExit(f"{path}: needs exactly one {begin} ... {end}")
        head, rest = text.split(begin)
        _, tail = rest.split(end)
        text = f"{head}{begin}\n{make()}\n{end}{tail}"
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only say whether they are current")
    args = parser.parse_args(argv)
    stale = []
    for relative, blocks in BLOCKS.items():
        path = REPO / relative
        text = path.read_text()
        new = render(text, blocks, relative)
        if new != text:
            stale.append(relative)
            if not args.check:
                path.write_text(new)
    if args.check and stale:
        print(f"out of date: {', '.join(stale)} (run python scripts/option_docs.py)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
