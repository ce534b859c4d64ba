"""adare's ``!re`` / ``!reALL`` tags and its timestamp filters (``tolerance``, ``format``)
(issue 36): loaded with their line, sent to the guest as regex and timestamp
placeholders, and judged there by the stock test functions, on a real agent process on
this host (the playbooks write their data with a ``command`` action)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_adare.guest import Guest
from pytest_adare.playbook.api import run_experiment
from pytest_adare.playbook.results import PlaybookResult
from pytest_adare.playbook.source import YamlSyntaxError, load_yaml
from pytest_adare.playbook.tags import RegexTag
from pytest_adare.playbook.templating import TemplateProblem, render_text
from tests.local_agent import local_agent_guest

PLAYBOOK = r"""
# adare's !re tags in the form its own test_json and test_csv experiments use them:
# a whole expected value, a CSV column, a pattern with variables in it.
settings:
  idle: 0.0
  timeout: 300
  continue_on_test_failure: true

variables:
  data:
    type: path
    value: "{{adare_temp_dir}}/regex-tags"
  version_regex:
    type: regex
    value: '\d+\.\d+\.\d+'
  dotted:
    type: string
    value: "a.b"

tests:
  - name: version_is_semver
    function: json.value_matches
    parameter:
      dst: "{{data}}/config.json"
      key_path: version
      expected_value: !re '^\d+\.\d+\.\d+$'
  - name: version_is_not_two_numbers
    function: json.value_matches
    expect_to_fail: true
    parameter:
      dst: "{{data}}/config.json"
      key_path: version
      expected_value: !re '^\d+\.\d+$'
  - name: every_email_looks_like_one
    function: json.value_matches
    parameter:
      dst: "{{data}}/config.json"
      key_path: "users[*].email"
      expected_value: !re '^[a-zA-Z0-9._%+-]+@[a-zA-Z0-9.-]+\.[a-zA-Z]{2,}$'
      wildcard_mode: all
  - name: a_row_with_a_decimal_amount
    function: csv.contains_line
    parameter:
      dst: "{{data}}/transactions.csv"
      entry: ['TXN003', !re '{{version_regex}}', 'completed', !re '\d+\.\d{2}']
  - name: any_amount_with_reall
    function: csv.contains_line
    parameter:
      dst: "{{data}}/transactions.csv"
      entry:
        - TXN001
        - 1.0.0
        - failed
        - !reALL  # any amount
  - name: a_variable_in_a_pattern_is_literal
    function: json.value_matches
    parameter:
      dst: "{{data}}/config.json"
      key_path: host
      expected_value: !re '^{{dotted}}$'
  - name: so_its_dot_matches_no_other_character
    function: json.value_matches
    expect_to_fail: true
    parameter:
      dst: "{{data}}/config.json"
      key_path: other_host
      expected_value: !re '^{{dotted}}$'

actions:
  - command:
      command: >-
        mkdir -p {{data}} &&
        printf '%s' '{"version": "2.14.1", "host": "a.b", "other_host": "axb",
        "users": [{"email": "ada@example.org"}, {"email": "bob.x@mail.example.com"}]}'
        > {{data}}/config.json &&
        printf 'id,version,status,amount\nTXN001,1.0.0,failed,12.5\nTXN003,3.0.1,completed,45.20\n'
        > {{data}}/transactions.csv
  - test: version_is_semver
  - test: version_is_not_two_numbers
  - test: every_email_looks_like_one
  - test: a_row_with_a_decimal_amount
  - test: any_amount_with_reall
  - test: a_variable_in_a_pattern_is_literal
  - test: so_its_dot_matches_no_other_character
"""
TOKEN = "regex-tags-token-0123456789abcdef"


@pytest.fixture(scope="module")
def local_guest(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Guest]:
    """The real agent as its own process on this host, driven through the facade."""
    with local_agent_guest(tmp_path_factory.mktemp("run"), TOKEN) as guest:
        yield guest


def run_text(guest: Guest, tmp_path: Path, name: str, playbook: str) -> PlaybookResult:
    """The experiment ``name`` whose ``playbook.yml`` is ``playbook``, run on ``guest``."""
    experiment = tmp_path / name
    experiment.mkdir()
    (experiment / "playbook.yml").write_text(playbook)
    return run_experiment(guest, experiment, artifacts=tmp_path / "out")


def test_the_tags_are_judged_by_the_guests_test_functions(
    local_guest: Guest, tmp_path: Path
) -> None:
    result = run_text(local_guest, tmp_path, "regex_tags", PLAYBOOK)
    verdicts = {v.name: (v.status, v.passed) for v in result.verdicts}
    assert verdicts == {
        "version_is_semver": ("SUCCESS", True),
        "version_is_not_two_numbers": ("FAILED", True),  # expected to fail, and it does
        "every_email_looks_like_one": ("SUCCESS", True),
        "a_row_with_a_decimal_amount": ("SUCCESS", True),
        "any_amount_with_reall": ("SUCCESS", True),
        "a_variable_in_a_pattern_is_literal": ("SUCCESS", True),
        "so_its_dot_matches_no_other_character": ("FAILED", True),
    }, [(v.name, v.details) for v in result.verdicts]


def test_the_loader_keeps_each_tag_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "p.yml"
    path.write_text("a: !re '^x$'\nb:\n  - !reALL\n  - !s plain\nc: !path /tmp/x\n")
    loaded = load_yaml(path)
    assert loaded["a"] == RegexTag("^x$", 1)
    assert loaded["b"] == [RegexTag(".*", 3), "plain"]
    assert loaded["c"] == "/tmp/x"


@pytest.mark.parametrize(
    ("text", "message", "line"),
    [
        ("a: !re\n  x: 1\n", "!re takes a single text value", 1),
        ("a: 1\nb: !timestamp_typo '1'\n", "could not determine a constructor", 2),
    ],
)
def test_a_tag_used_wrongly_or_unknown_is_a_yaml_error_with_its_line(
    tmp_path: Path, text: str, message: str, line: int
) -> None:
    path = tmp_path / "p.yml"
    path.write_text(text)
    with pytest.raises(YamlSyntaxError) as error:
        load_yaml(path)
    assert message in str(error.value) and error.value.line == line


def test_a_pattern_that_is_no_regex_names_the_test(local_guest: Guest, tmp_path: Path) -> None:
    broken = (
        "tests:\n  - name: broken\n    function: json.value_matches\n    parameter:\n"
        "      dst: /nonexistent\n      key_path: a\n      expected_value: !re '(unclosed'\n"
        "actions:\n  - test: broken\n"
    )
    result = run_text(local_guest, tmp_path, "bad", broken)
    assert not result.completed and result.verdicts == []  # it never reached the guest
    assert result.error is not None
    assert "!re '(unclosed' is no regular expression" in result.error
    assert "tests.broken.parameter" in result.error


STAMPS = r"""
settings:
  idle: 0.0
  continue_on_test_failure: true
variables:
  data:
    type: path
    value: "{{adare_temp_dir}}/stamp-filters"
  written_at:
    type: timestamp
    value: "2025-01-15 18:30:00"
    timezone: "+04:00"
tests:
  - name: within_30_s
    function: json.value_matches
    parameter:
      dst: "{{data}}/event.json"
      key_path: created_at
      expected_value: "{{ written_at | tolerance(30) | format('%Y-%m-%d %H:%M:%S') }}"
  - name: not_within_5_s
    function: json.value_matches
    expect_to_fail: true
    parameter:
      dst: "{{data}}/event.json"
      key_path: created_at
      expected_value: "{{ written_at | format('%Y-%m-%d %H:%M:%S') | tolerance(5) }}"
actions:
"""
# The action both timestamp playbooks start with: the file their tests read (12 s after
# the declared 18:30:00+04:00).
WRITE_EVENT = r"""
  - command:
      command: >-
        mkdir -p {{data}} &&
        printf '%s' '{"created_at": "2025-01-15 14:30:12"}' > {{data}}/event.json
"""
STAMPS += WRITE_EVENT.lstrip("\n") + "  - test: within_30_s\n  - test: not_within_5_s\n"


def test_a_timestamp_within_its_tolerance_in_the_files_format(
    local_guest: Guest, tmp_path: Path
) -> None:
    # 14:30:12 in the file (UTC, no zone), 18:30:00+04:00 declared: 12 s apart.
    result = run_text(local_guest, tmp_path, "stamps", STAMPS)
    verdicts = {v.name: (v.status, v.passed) for v in result.verdicts}
    assert verdicts == {
        "within_30_s": ("SUCCESS", True), "not_within_5_s": ("FAILED", True)
    }, [(v.name, v.details) for v in result.verdicts]  # fmt: skip
    within, outside = (v.details[0] for v in result.verdicts)
    assert "'2025-01-15 14:30:12' is -12.000 s from 2025-01-15T18:30:00+04:00" in within
    assert within.endswith("within tolerance [-30, 30] s")
    assert outside.endswith("outside tolerance [-5, 5] s")


def test_jinjas_own_format_stays_and_a_filter_on_no_timestamp_says_so() -> None:
    assert render_text("{{ '%s-%s' | format('a', 'b') }}", {}) == "a-b"
    assert str(render_text("{{ t | tolerance(5) }}", {"t": "2025-01-15T10:00:00Z"})) == (
        "2025-01-15T10:00:00Z"
    )
    with pytest.raises(TemplateProblem, match="the tolerance filter takes a timestamp"):
        render_text("{{ 'soon' | tolerance(5) }}", {})


STAMP_TAGS = r"""
# adare's !timestamp tag, in the shape of its YamlTimestamp (a mapping of its keys).
settings:
  idle: 0.0
  continue_on_test_failure: true
variables:
  data:
    type: path
    value: "{{adare_temp_dir}}/stamp-tags"
  written_at:
    type: timestamp
    value: "2025-01-15 18:30:00"
    timezone: "+04:00"
tests:
  - name: tagged_within_30_s
    function: json.value_matches
    parameter:
      dst: "{{data}}/event.json"
      key_path: created_at
      expected_value: !timestamp
        timestamp: "{{ written_at }}"
        tolerance: 30
        timestamp_format_in_entry: "%Y-%m-%d %H:%M:%S"
  - name: tagged_not_within_5_s
    function: json.value_matches
    expect_to_fail: true
    parameter:
      dst: "{{data}}/event.json"
      key_path: created_at
      expected_value: !timestamp {timestamp: "{{ written_at }}", tolerance: 5,
                                  format: "%Y-%m-%d %H:%M:%S"}
  - name: in_its_own_format
    function: json.value_matches
    parameter:
      dst: "{{data}}/event.json"
      key_path: created_at
      expected_value: !timestamp {timestamp: "15.01.2025 14:30", tolerance: 15,
                                  timestamp_format_comparison: "%d.%m.%Y %H:%M",
                                  format: "%Y-%m-%d %H:%M:%S", timezone: UTC}
actions:
"""
STAMP_TAGS += WRITE_EVENT.lstrip("\n") + (
    "  - test: tagged_within_30_s\n  - test: tagged_not_within_5_s\n  - test: in_its_own_format\n"
)


def test_adares_timestamp_tag_is_compared_as_a_time(local_guest: Guest, tmp_path: Path) -> None:
    result = run_text(local_guest, tmp_path, "stamp-tags", STAMP_TAGS)
    verdicts = {v.name: (v.status, v.passed) for v in result.verdicts}
    assert verdicts == {
        "tagged_within_30_s": ("SUCCESS", True), "tagged_not_within_5_s": ("FAILED", True),
        "in_its_own_format": ("SUCCESS", True),
    }, [(v.name, v.details) for v in result.verdicts]  # fmt: skip
    within = result.verdicts[0].details[0]
    assert "is -12.000 s from 2025-01-15T18:30:00+04:00" in within, within


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("!timestamp {timestamp: '2025-01-15', tolerence: 5}", "has no key tolerence"),
        ("!timestamp {tolerance: 5}", "needs its 'timestamp'"),
        ("!timestamp {timestamp: '2025-01-15', tolerance: soon}", "tolerance must be a number"),
        ("!timestamp [1, 2]", "takes a timestamp or a mapping"),
    ],
)
def test_a_timestamp_tag_used_wrongly_is_a_yaml_error_with_its_line(
    tmp_path: Path, value: str, message: str
) -> None:
    path = tmp_path / "p.yml"
    path.write_text(f"a: 1\nb: {value}\n")
    with pytest.raises(YamlSyntaxError) as error:
        load_yaml(path)
    assert message in str(error.value) and error.value.line == 2


def test_a_timestamp_tag_that_is_no_time_names_the_test(
    local_guest: Guest, tmp_path: Path
) -> None:
    broken = (
        "tests:\n  - name: broken\n    function: json.value_matches\n    parameter:\n"
        "      dst: /nonexistent\n      key_path: a\n"
        "      expected_value: !timestamp {timestamp: 'next tuesday', tolerance: 5}\n"
        "actions:\n  - test: broken\n"
    )
    result = run_text(local_guest, tmp_path, "bad-stamp", broken)
    assert result.error is not None and result.verdicts == []
    assert "!timestamp 'next tuesday' is no ISO 8601 time" in result.error
    assert "tests.broken.parameter" in result.error


def test_a_command_cut_by_the_runs_timeout_says_so(local_guest: Guest, tmp_path: Path) -> None:
    # adare's test_longrunning: a 180 s command in a run of settings.timeout 3 s.
    playbook = (
        "settings: {timeout: 3}\n"
        "actions:\n"
        "  - command: {command: 'sleep 30.75', timeout: 180}\n"
    )
    result = run_text(local_guest, tmp_path, "longrunning", playbook)
    assert not result.passed
    assert result.error is not None and result.error.startswith(
        "settings.timeout (3s) reached during playbook.yml:3: command ("
    ), result.error
    assert "command timed out" in result.error
    local_guest.wait_until_fails("pgrep -fx 'sleep 30.75'", timeout=30)
