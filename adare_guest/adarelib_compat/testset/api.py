"""adarelib's test-function API: ``testfunction``, ``TestContext``, ``TestFailed``, ``TestError``.

``@testfunction(name, description, category=..., execute_on_host=False)`` registers
the function with the agent's own decorator, which marks it adare-style. Loading
its collection (:mod:`adare_guest.testfunctions.library`) then builds its ``ctx``
from :class:`TestContext` here: our
:class:`~adare_guest.testfunctions.TestContext` plus adare's helpers, which
return adare's ``(value, message)`` tuples.
"""

from __future__ import annotations

import glob
from collections.abc import Callable
from typing import Any, TypeVar

from adare_guest.adarelib_compat.testset.basictest import HostModeCategory
from adare_guest.placeholders import PlaceholderError, has_placeholders, placeholder_names
from adare_guest.testfunctions import TestContext as NativeContext
from adare_guest.testfunctions import TestError, TestFailed
from adare_guest.testfunctions import testfunction as native_testfunction

__all__ = ["HostModeCategory", "TestContext", "TestError", "TestFailed", "testfunction"]

F = TypeVar("F", bound=Callable[..., Any])
_GLOB_CHARS = frozenset("*?[]")


def testfunction(
    name: str,
    description: str,
    category: HostModeCategory = HostModeCategory.AGENT_ONLY,
    execute_on_host: bool = False,
) -> Callable[[F], F]:
    """adare's decorator: name and description required, category recorded.

    ``execute_on_host=True`` is accepted, but running such a function answers
    ERROR: pytest-adare runs every test function in the guest.
    """
    return native_testfunction(name, description, category, execute_on_host)


class TestContext(NativeContext):
    """``ctx`` of adare-style test functions: ours plus adare's helper methods."""

    __test__ = False

    @property
    def host(self) -> None:
        """adare's host context (screenshots for host-side tests): never available here."""
        return None

    @property
    def variable_metadata(self) -> dict[str, dict[str, Any]] | None:
        """Metadata of every known placeholder (adare's ``_VARIABLE_METADATA`` view)."""
        return self.placeholders.metadata or None

    def resolve_globfilepath(
        self, globfilepath: str, match_mode: str = "single", return_list: bool = False
    ) -> tuple[str | list[str], str]:
        """adare's path resolution: ``(path or paths, "")`` or ``(empty, reason)``.

        A path without glob characters is returned as is (it may not exist).
        ``match_mode="single"`` needs exactly one match, ``"any"`` takes 0 or more.
        """
        if not _GLOB_CHARS.intersection(globfilepath):
            return ([globfilepath] if return_list else globfilepath), ""
        found = sorted(glob.glob(globfilepath))
        empty: str | list[str] = [] if return_list else ""
        if match_mode == "single":
            if not found:
                return empty, "no files match the given path (glob) expression"
            if len(found) > 1:
                return empty, f"{len(found)} files found that match given path (glob) expression"
            return (found if return_list else found[0]), ""
        return (found if return_list else (found[0] if found else "")), ""

    def has_placeholders(self, text: str) -> bool:
        """True when ``text`` holds a ``{{ name }}`` placeholder."""
        return has_placeholders(text)

    def get_placeholders(self, text: str) -> list[str]:
        """The placeholder names in ``text``."""
        return placeholder_names(text)

    def resolve_variables(self, text: str) -> str:
        """``text`` with every known placeholder replaced by its value."""
        return self.placeholders.resolve(text)

    def get_placeholder_metadata(self, placeholder_name: str) -> dict[str, Any]:
        """The placeholder's metadata (``{}`` when unknown)."""
        return self.placeholders.metadata_for(placeholder_name) or {}

    def has_tolerance_metadata(self, placeholder_name: str) -> bool:
        """True when the placeholder has a (non-zero) tolerance."""
        return bool(self.get_placeholder_metadata(placeholder_name).get("tolerance"))

    def compare_with_placeholder(
        self, placeholder_name: str, actual_value: str
    ) -> tuple[bool, str]:
        """``(matches, message)`` for one value; an unusable placeholder is ``(False, why)``."""
        try:
            outcome = self.placeholders.compare(placeholder_name, actual_value)
        except PlaceholderError as exc:
            return False, str(exc)
        return outcome.ok, outcome.message

    def handle_placeholders_comparison(
        self, actual_content: str, expected_template: str
    ) -> tuple[bool, str]:
        """``(matches, message)`` for a text against a template with placeholders."""
        try:
            outcome = self.placeholders.match_template(actual_content, expected_template)
        except PlaceholderError as exc:
            return False, str(exc)
        return outcome.ok, outcome.message
