"""Recorded values: ``adare_record(name, value)`` keeps what a test read, for the matrix.

A forensic test across images wants to see the artifacts themselves side by side (a
Trash entry's ``DeletionDate``, a package's version), not only pass or fail::

    def test_trash(guest, adare_record):
        info = guest.shell("cat ~/.local/share/Trash/info/a.trashinfo").stdout
        adare_record("trashinfo", info)

The values must be JSON (they are written to ``adare-matrix.json``) and are bounded:
at most :data:`MAX_RECORDS` names per test, :data:`MAX_VALUE_BYTES` of JSON per value,
nested at most :data:`~pytest_adare.plugin.matrix_table.MAX_RECORD_DEPTH` deep.
Recording a name again replaces its value. When the call phase ends they are
the item's ``adare_records`` property (JSON), which reaches the matrix report with the
test's reports, also from xdist workers.
"""

from __future__ import annotations

import json
from collections.abc import Generator
from typing import Any

import pytest

from pytest_adare.plugin.matrix_table import MAX_RECORD_DEPTH, nests_deeper

RECORDS_KEY = pytest.StashKey[dict[str, Any]]()
RECORDS_PROPERTY = "adare_records"
MAX_RECORDS = 64
MAX_VALUE_BYTES = 4096
MAX_NAME = 100


class Recorder:
    """The ``adare_record`` fixture: ``adare_record(name, value)``."""

    def __init__(self, values: dict[str, Any]) -> None:
        self._values = values

    def __call__(self, name: str, value: object) -> None:
        """Record ``value`` (JSON: None, bool, numbers, text, lists, objects) as ``name``.

        :raise ValueError: a blank or too long name, a value that is not JSON, nests
            deeper than :data:`MAX_RECORD_DEPTH` or whose JSON is over
            :data:`MAX_VALUE_BYTES`, more than :data:`MAX_RECORDS` names.
        """
        if not isinstance(name, str) or not name.strip() or len(name) > MAX_NAME:
            raise ValueError(
                f"adare_record: a name is non-empty text of at most {MAX_NAME} characters, "
                f"got {name!r}"
            )
        if nests_deeper(value, MAX_RECORD_DEPTH):
            raise ValueError(
                f"adare_record({name!r}): the value nests deeper than {MAX_RECORD_DEPTH} "
                "lists or objects"
            )
        try:
            text = json.dumps(value, allow_nan=False, sort_keys=True)
        except (TypeError, ValueError) as error:
            raise ValueError(f"adare_record({name!r}): the value is not JSON ({error})") from None
        if len(text.encode()) > MAX_VALUE_BYTES:
            raise ValueError(
                f"adare_record({name!r}): the value's JSON is {len(text.encode())} bytes, "
                f"more than {MAX_VALUE_BYTES}; record a digest or an excerpt"
            )
        if name not in self._values and len(self._values) >= MAX_RECORDS:
            raise ValueError(f"adare_record({name!r}): a test records at most {MAX_RECORDS} names")
        self._values[name] = json.loads(text)  # a copy: later changes to value do not count

    @property
    def values(self) -> dict[str, Any]:
        """What this test recorded so far (name → value)."""
        return dict(self._values)


@pytest.fixture
def adare_record(request: pytest.FixtureRequest) -> Recorder:
    """Record a value for the image matrix report: ``adare_record("version", text)``."""
    return Recorder(request.node.stash.setdefault(RECORDS_KEY, {}))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    values = item.stash.get(RECORDS_KEY, None)
    if call.when == "call" and values:
        # The teardown report copies the item's properties: the matrix reads that one.
        item.user_properties.append((RECORDS_PROPERTY, json.dumps(values, sort_keys=True)))
    return report
