"""An experiment folder read whole: ``playbook.yml``, ``metadata.yml``, names checked.

:func:`load_experiment` is what collection calls: the playbook (:mod:`.schema`), the
metadata's environments, description and tags, and a check that every template names
a variable something defines (declared, automatic, made by an action, a loop's), so a
typo fails before the VM boots, with its line.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from pytest_adare.playbook.errors import PlaybookError
from pytest_adare.playbook.schema import Playbook, Step, parse_playbook
from pytest_adare.playbook.source import Located, YamlSyntaxError, load_yaml
from pytest_adare.playbook.targets import TargetProblem, needle_path
from pytest_adare.playbook.templating import has_template, syntax_problem
from pytest_adare.playbook.variables import created_names, template_names

METADATA_NAME = "metadata.yml"
GUI_ACTIONS = frozenset({"click", "drag", "scroll", "goto", "keyboard", "wait_until"})
AUTOMATIC = frozenset({
    "adare_username", "adare_user_home", "adare_user_documents", "adare_user_desktop",
    "adare_user_downloads", "adare_os", "adare_temp_dir", "adare_run_dir", "adare_shared",
    "adare_shared_tools", "adare_shared_data", "adare_project_shared",
    "adare_project_shared_tools", "adare_project_shared_data", "adare_root_dir",
    "adare_system_drive",
})  # fmt: skip


@dataclass(frozen=True)
class Experiment:
    name: str
    playbook: Playbook
    environments: tuple[str, ...] = ()
    description: str = ""
    tags: tuple[str, ...] = ()


def read(path: Path) -> object:
    try:
        return load_yaml(path)
    except YamlSyntaxError as error:
        raise PlaybookError(path, str(error), line=error.line) from None
    except OSError as error:
        raise PlaybookError(path, f"cannot read: {error.strerror}") from None


def load_experiment(path: Path) -> Experiment:
    """The experiment whose ``playbook.yml`` is ``path``.

    :raise PlaybookError: the first problem, with its file, line and field.
    """
    playbook = parse_playbook(path, read(path))
    check_names(playbook)
    check_needles(playbook)
    metadata_path = path.parent / METADATA_NAME
    environments: tuple[str, ...] = ()
    description, tags = "", tuple[str, ...]()
    if metadata_path.is_file():
        metadata = read(metadata_path)
        if metadata is not None and not isinstance(metadata, Located):
            raise PlaybookError(metadata_path, "must be a mapping")
        metadata = metadata or Located()
        environments = _names(metadata, "environments", metadata_path)
        tags = _names(metadata, "tags", metadata_path)
        description = str(metadata.get("description") or "")
    return Experiment(path.parent.name, playbook, environments, description, tags)


def _names(metadata: Located, key: str, path: Path) -> tuple[str, ...]:
    value = metadata.get(key)
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, (str, int)) for v in value):
        raise PlaybookError(path, "must be a list of names", line=metadata.line_of(key), field=key)
    return tuple(str(v) for v in value)


def uses(steps: Iterable[Step], kinds: frozenset[str]) -> bool:
    return any(step.kind in kinds or uses(step.children, kinds) for step in steps)


def check_needles(playbook: Playbook) -> None:
    """Every needle a target names (``image:``, not a template) is in ``img/``."""

    def images(value: object) -> Iterable[str]:
        if isinstance(value, dict):
            for key, item in value.items():
                if key == "image" and isinstance(item, str) and not has_template(item):
                    yield item
                else:
                    yield from images(item)
        elif isinstance(value, list):
            for item in value:
                yield from images(item)

    def walk(steps: Iterable[Step]) -> None:
        for step in steps:
            for key, value in step.fields.items():
                for name in images(value) if key != "actions" else ():
                    try:
                        needle_path(playbook.folder, name)
                    except TargetProblem as error:
                        raise PlaybookError(
                            playbook.path,
                            str(error),
                            line=step.line_of(key),
                            field=f"{step.kind}.{key}.image",
                        ) from None
            walk(step.children)

    walk(playbook.actions)


def check_names(playbook: Playbook) -> None:
    """Every template compiles and reads only names something defines.

    Names made at run time under a template (``save_variable: name: "v_{{index}}"``)
    cannot be known before the run: a playbook that makes such names is checked for
    syntax only; the run names what is undefined when it is read.
    """
    known = set(AUTOMATIC) | {v.name for v in playbook.variables}
    known |= created_names(playbook.actions)
    dynamic = any(has_template(name) for name in known)

    def check(value: object, line: int, where: str) -> None:
        if isinstance(value, str) and has_template(value):
            problem = syntax_problem(value)
            if problem is not None:
                raise PlaybookError(playbook.path, problem, line=line, field=where)
        if dynamic:
            return
        missing = sorted(template_names(value) - known)
        if missing:
            raise PlaybookError(
                playbook.path, f"undefined variable {missing[0]!r}", line=line, field=where
            )

    def walk(steps: Iterable[Step]) -> None:
        for step in steps:
            for key, value in step.fields.items():
                if key != "actions":
                    check(value, step.line_of(key), f"{step.kind}.{key}")
            walk(step.children)

    walk(playbook.actions)
    for spec in playbook.variables:
        check(spec.value, spec.line, f"variables.{spec.name}")
    for test in playbook.tests.values():
        check(dict(test.parameter), test.line, f"tests.{test.name}.parameter")
