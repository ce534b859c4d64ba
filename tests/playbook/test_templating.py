"""Templates and parser expressions run in Jinja2's sandbox: a hostile experiment reads
no host file and cannot exhaust memory; adare's Python-like parsers still work."""

from __future__ import annotations

import pytest

from pytest_adare.playbook.conditions import condition_holds
from pytest_adare.playbook.tags import as_placeholders
from pytest_adare.playbook.templating import TemplateProblem, evaluate, render


def test_a_single_expression_keeps_its_type() -> None:
    assert render("{{ n + 1 }}", {"n": 41}) == 42
    assert render("{{names}}", {"names": ["a", "b"]}) == ["a", "b"]
    assert render("x-{{n}}", {"n": 1}) == "x-1"


def test_text_shows_values_as_adare_does() -> None:
    values = {"yes": True, "names": ["a", "b"], "config": {"k": 1}}
    assert render("{{yes}} {{names}} {{config}}", values) == 'true ["a", "b"] {"k": 1}'


def test_parsers_written_for_adare_evaluate() -> None:
    output = "Version: 3.14.159\n"
    parser = r"re.search(r'\d+\.\d+\.\d+', output).group(0) if re.search(r'\d+', output) else 'u'"
    assert evaluate(parser, {"output": output}) == "3.14.159"
    assert evaluate("json.loads(output)['v']", {"output": '{"v": 2}'}) == 2
    assert evaluate("len(output.strip().split('\\n'))", {"output": "a\nb\n"}) == 2


@pytest.mark.parametrize(
    "hostile",
    [
        "{{ json.loads.__globals__ }}",
        "{{ ''.__class__.__mro__ }}",
        "{{ 'a' * 100000000 }}",
        "{{ 9 ** 999999 }}",
        "{{ lipsum.__globals__ }}",
    ],
)
def test_the_sandbox_refuses_what_reaches_the_host(hostile: str) -> None:
    with pytest.raises(TemplateProblem):
        render(hostile, {})


def test_an_undefined_name_is_named() -> None:
    with pytest.raises(TemplateProblem, match="'missing' is undefined"):
        render("ls {{missing}}", {})


def test_a_parser_that_raises_says_so() -> None:
    with pytest.raises(TemplateProblem, match="ValueError"):
        evaluate("int(output)", {"output": "not a number"})


def test_conditions() -> None:
    values = {"n": 50, "s": "has_content", "e": ""}
    assert condition_holds({"variable": "n", "greater_than": 10}, values)
    assert not condition_holds({"variable": "n", "less_than": 10}, values)
    assert condition_holds({"variable": "s", "contains": "content"}, values)
    assert condition_holds({"variable": "s", "matches": "^has"}, values)
    assert condition_holds({"variable": "e", "is_empty": True}, values)
    assert condition_holds({"variable": "n", "equals": "50"}, values)
    assert condition_holds({"variable": "unset", "is_empty": True}, values)


def test_a_timestamp_reads_iso_text_whatever_its_display_format() -> None:
    from pytest_adare.playbook.variables import timestamp

    assert timestamp("2025-01-15 10:30:00", "utc", "%Y-%m-%dT%H:%M:%SZ") == (
        "2025-01-15T10:30:00+00:00"
    )
    assert timestamp("15.01.2025 10:30", "+02:00", "%d.%m.%Y %H:%M") == (
        "2025-01-15T10:30:00+02:00"
    )


def test_format_without_a_tolerance_is_the_time_in_that_format() -> None:
    # adare's test_xml: `{{ fixed_timestamp | format('%Y-%m-%dT%H:%M:%S') }}` is text
    # (strftime in the timestamp's own zone), not the ISO value with its offset.
    stamp = {"t": "2025-01-15T18:30:05+04:00"}
    value, extra = as_placeholders(
        render("{{ t | format('%Y-%m-%dT%H:%M:%S') }}", stamp), stamp, frozenset()
    )
    assert (value, extra) == ("2025-01-15T18:30:05", {})
    assert render("at {{ t | format('%H:%M') }}", stamp) == "at 18:30"
    tolerant, extra = as_placeholders(
        render("{{ t | tolerance(30) | format('%H:%M') }}", stamp), stamp, frozenset()
    )
    assert tolerant == "{{ timestamp_0_resolved }}" and extra["timestamp_0_resolved"]["format"]
