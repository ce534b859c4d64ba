"""The stock ``xml`` collection: elements, text and attributes of an XML file.

Paths are the XPath subset of :mod:`xml.etree.ElementTree`: ``/root/a/b``,
``//item``, ``item[@id='3']``, ``a/b[2]``, ``{uri}tag`` or ``ns:tag`` with a
``namespaces`` map. Functions (``text()``, ``count()``) and axes are not
supported: such a path is an ERROR saying so. A missing file or invalid XML
is FAILED.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ElementTree
from typing import Any

from adare_guest.stock.support import compare, one_path, read_bytes
from adare_guest.testfunctions import TestContext, TestError, testfunction

_COUNT_TESTS = {
    "equals": lambda n, k: n == k,
    "not_equals": lambda n, k: n != k,
    "greater_than": lambda n, k: n > k,
    "less_than": lambda n, k: n < k,
    "at_least": lambda n, k: n >= k,
    "at_most": lambda n, k: n <= k,
}


def _root(ctx: TestContext, dst: str) -> tuple[str, ElementTree.Element]:
    path = one_path(ctx, dst)
    try:
        return path, ElementTree.fromstring(read_bytes(ctx, path))
    except ElementTree.ParseError as exc:
        ctx.fail(f"{path} is not valid XML: {exc}")


def _find(
    ctx: TestContext, root: ElementTree.Element, xpath: str, namespaces: dict[str, str] | None
) -> list[ElementTree.Element]:
    """Elements at ``xpath``; an absolute path's first step must name the root."""
    try:
        if xpath.startswith("//"):
            return root.findall("." + xpath, namespaces)
        if xpath.startswith("/"):
            first, _, rest = xpath[1:].partition("/")
            if not _is_root(root, first, namespaces):
                return []
            return root.findall(rest, namespaces) if rest else [root]
        return root.findall(xpath, namespaces)
    except (SyntaxError, KeyError) as exc:
        raise TestError(
            f"xpath {xpath!r} is outside the supported subset (ElementTree): {exc}"
        ) from None


def _is_root(root: ElementTree.Element, step: str, namespaces: dict[str, str] | None) -> bool:
    # Compare the step with the root by asking ElementTree from a throwaway parent.
    parent = ElementTree.Element("_")
    parent.append(root)
    return root in parent.findall(step, namespaces)


def _text_matches(
    ctx: TestContext, actual: str, expected: Any, regex_match: bool, case_sensitive: bool
) -> tuple[bool, str]:
    if not case_sensitive and isinstance(expected, str) and "{{" not in expected:
        actual, expected = actual.lower(), expected.lower()
        if regex_match:
            expected = "(?i)" + expected
    outcome = compare(ctx, actual, expected, regex_match)
    return outcome.ok, outcome.message


@testfunction(description="an element exists at xpath")
def element_exists(
    ctx: TestContext, dst: str, xpath: str, namespaces: dict[str, str] | None = None
) -> str:
    path, root = _root(ctx, dst)
    found = _find(ctx, root, xpath, namespaces)
    ctx.fail_if(not found, f"no element at {xpath} in {path}")
    return f"{len(found)} element(s) at {xpath}"


@testfunction(description="the text of the element(s) at xpath equals or matches expected_text")
def element_text_matches(
    ctx: TestContext,
    dst: str,
    xpath: str,
    expected_text: str = "",
    regex_match: bool = False,
    case_sensitive: bool = True,
    wildcard_mode: str = "any",
    namespaces: dict[str, str] | None = None,
) -> list[str]:
    ctx.error_if(wildcard_mode not in ("any", "all"), "wildcard_mode must be any or all")
    path, root = _root(ctx, dst)
    found = _find(ctx, root, xpath, namespaces)
    ctx.fail_if(not found, f"no element at {xpath} in {path}")
    results = [
        _text_matches(ctx, (e.text or "").strip(), expected_text, regex_match, case_sensitive)
        for e in found
    ]
    hits = sum(ok for ok, _ in results)
    enough = hits == len(found) if wildcard_mode == "all" else hits > 0
    misses = [message for ok, message in results if not ok][:3]
    ctx.fail_if(not enough, "; ".join([f"{hits}/{len(found)} elements at {xpath} match", *misses]))
    return [f"{hits}/{len(found)} element(s) at {xpath} match (mode: {wildcard_mode})"]


@testfunction(
    description="an attribute of the element(s) at xpath equals or matches expected_value"
)
def attribute_matches(
    ctx: TestContext,
    dst: str,
    xpath: str,
    attribute: str,
    expected_value: str,
    regex_match: bool = False,
    case_sensitive: bool = True,
    namespaces: dict[str, str] | None = None,
) -> str:
    path, root = _root(ctx, dst)
    found = _find(ctx, root, xpath, namespaces)
    ctx.fail_if(not found, f"no element at {xpath} in {path}")
    having = [e for e in found if attribute in e.attrib]
    ctx.fail_if(not having, f"no element at {xpath} has attribute {attribute!r}")
    messages = []
    for element in having:
        ok, message = _text_matches(
            ctx, element.attrib[attribute], expected_value, regex_match, case_sensitive
        )
        if ok:
            return f"{xpath}/@{attribute}: {message}"
        messages.append(message)
    ctx.fail(f"{xpath}/@{attribute}: " + "; ".join(messages[:3]))


@testfunction(description="the number of elements at xpath compares to expected_count")
def element_count(
    ctx: TestContext,
    dst: str,
    xpath: str,
    expected_count: int = 0,
    comparison_type: str = "equals",
    namespaces: dict[str, str] | None = None,
) -> str:
    test = _COUNT_TESTS.get(comparison_type)
    ctx.error_if(test is None, f"comparison_type must be one of {sorted(_COUNT_TESTS)}")
    assert test is not None
    _, root = _root(ctx, dst)
    count = len(_find(ctx, root, xpath, namespaces))
    verdict = f"{count} element(s) at {xpath}, expected {comparison_type} {expected_count}"
    ctx.fail_if(not test(count, expected_count), verdict)
    return verdict


@testfunction(description="the root element declares these prefix -> namespace URIs")
def namespace_matches(
    ctx: TestContext,
    dst: str,
    expected_namespaces: dict[str, str] | None = None,
    check_mode: str = "contains",
) -> str:
    ctx.error_if(check_mode not in ("contains", "exact"), "check_mode must be contains or exact")
    path = one_path(ctx, dst)
    declared = dict(
        re.findall(
            r'xmlns(?::([\w.-]+))?\s*=\s*["\']([^"\']*)["\']',
            read_bytes(ctx, path).decode("utf-8", "replace"),
        )
    )
    wanted = expected_namespaces or {}
    if check_mode == "exact":
        ctx.fail_if(declared != wanted, f"{path} declares {declared}, expected exactly {wanted}")
    missing = {k: v for k, v in wanted.items() if declared.get(k) != v}
    ctx.fail_if(bool(missing), f"{path} lacks {missing}; it declares {declared}")
    return f"{path} declares {wanted}"
