"""A bad experiment is refused with its file, line and field, before any VM boots."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_adare.playbook.errors import PlaybookError
from pytest_adare.playbook.load import load_experiment


def playbook(tmp_path: Path, text: str) -> Path:
    folder = tmp_path / "exp"
    folder.mkdir(exist_ok=True)
    path = folder / "playbook.yml"
    path.write_text(text)
    return path


def error_of(tmp_path: Path, text: str) -> str:
    with pytest.raises(PlaybookError) as caught:
        load_experiment(playbook(tmp_path, text))
    return str(caught.value)


def test_a_misspelt_action_names_its_line_and_the_close_match(tmp_path: Path) -> None:
    message = error_of(
        tmp_path, "actions:\n  - command:\n      command: ls\n  - comand:\n      command: ls\n"
    )
    assert message.endswith(
        "playbook.yml:4: actions[1].comand: unknown action: did you mean command?"
    )


def test_a_misspelt_field_names_the_field(tmp_path: Path) -> None:
    message = error_of(tmp_path, "actions:\n  - command:\n      comand: ls\n")
    assert (
        "playbook.yml:3: actions[0].command.comand: unknown field: did you mean command?" in message
    )


def test_yaml_syntax_error_has_the_line(tmp_path: Path) -> None:
    message = error_of(tmp_path, "actions:\n  - command:\n      command: [ls\n  - idle: 1\n")
    assert "playbook.yml:4: YAML syntax error" in message


def test_a_wrong_type_says_what_was_expected(tmp_path: Path) -> None:
    message = error_of(tmp_path, "actions:\n  - idle:\n      duration: soon\n")
    assert (
        "playbook.yml:3: actions[0].idle.duration: must be an integer or a number, got text"
        in message
    )


def test_an_unknown_test_name_is_refused(tmp_path: Path) -> None:
    text = (
        "tests:\n  - name: file_made\n    function: file_exists\n    parameter: {dst: /x}\n"
        "actions:\n  - test: file_mad\n"
    )
    message = error_of(tmp_path, text)
    assert (
        "playbook.yml:6: test: no test named 'file_mad' in tests:: did you mean file_made?"
        in message
    )


def test_an_undefined_variable_is_refused_before_the_run(tmp_path: Path) -> None:
    text = (
        "variables:\n  work: {type: path, value: /tmp/w}\n"
        "actions:\n  - command:\n      command: ls {{wrok}}\n"
    )
    message = error_of(tmp_path, text)
    assert "playbook.yml:5: command.command: undefined variable 'wrok'" in message


def test_a_variable_of_the_wrong_type(tmp_path: Path) -> None:
    from pytest_adare.playbook.variables import resolve_declared

    path = playbook(tmp_path, "variables:\n  n: {type: integer, value: many}\nactions: []\n")
    experiment = load_experiment(path)
    with pytest.raises(PlaybookError, match=r"playbook.yml:2: variables.n: not a integer"):
        resolve_declared(experiment.playbook, {})


def test_a_loop_needs_times_or_items(tmp_path: Path) -> None:
    message = error_of(tmp_path, "actions:\n  - loop:\n      actions: []\n")
    assert "give exactly one of times, items" in message


def test_a_condition_has_one_operator(tmp_path: Path) -> None:
    text = "actions:\n  - stop:\n      condition: {variable: x, equals: 1, contains: a}\n"
    assert "give exactly one operator" in error_of(tmp_path, text)


def test_metadata_environments_must_be_a_list(tmp_path: Path) -> None:
    path = playbook(tmp_path, "actions: []\n")
    (path.parent / "metadata.yml").write_text("environments: win11\n")
    with pytest.raises(PlaybookError, match=r"metadata.yml:1: environments: must be a list"):
        load_experiment(path)


def test_a_missing_needle_is_refused_before_the_run(tmp_path: Path) -> None:
    text = "actions:\n  - idle: {duration: 0}\n  - click:\n      target: {image: taskbar.png}\n"
    message = error_of(tmp_path, text)
    assert "playbook.yml:4: click.target.image: needle image 'taskbar.png' not found in" in message


def test_a_needle_outside_the_experiment_is_refused(tmp_path: Path) -> None:
    (tmp_path / "secret.png").write_bytes(b"x")
    text = "actions:\n  - click:\n      target: {image: ../../secret.png}\n"
    assert "needle image '../../secret.png' not found" in error_of(tmp_path, text)


def test_a_present_needle_is_accepted(tmp_path: Path) -> None:
    path = playbook(tmp_path, "actions:\n  - click:\n      target: {image: bar.png}\n")
    (path.parent / "img").mkdir()
    (path.parent / "img" / "bar.png").write_bytes(b"png")
    assert load_experiment(path).playbook.actions[0].kind == "click"


def test_a_setting_not_supported_is_refused_not_ignored(tmp_path: Path) -> None:
    text = "settings:\n  idle: 0\n  forensic_logging: true\nactions: []\n"
    message = error_of(tmp_path, text)
    assert "playbook.yml:3: settings.forensic_logging: not supported by pytest-adare" in message


def test_continue_outside_a_loop_or_block_is_refused(tmp_path: Path) -> None:
    text = "actions:\n  - idle: {duration: 0}\n  - continue:\n      description: next\n"
    message = error_of(tmp_path, text)
    assert "playbook.yml:3: continue: continue is only valid inside a loop or block" in message
