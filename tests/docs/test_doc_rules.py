"""How the harness reads a doc: skip markers, set-up blocks, hidden tests, claims."""

from __future__ import annotations

from pathlib import Path

import pytest
from doc_examples import blocks_of, claims_as_asserts

DOC = '''# A page

<!-- skip: next "a CI system's workflow file" -->
```yaml
on: [push]
```

```text
launch(image, *, ...)
```

<!-- invisible-code-block: python
before = guest.fs_snapshot("/tmp")
-->
```python
diff = guest.fs_snapshot("/tmp").diff(before)
```

```python
# checks/checks.py
from adare_guest.testfunctions import testfunction
```

<!-- invisible-code-block: python
def test_the_checks_pass(guest):
    # docs: fails as the report below shows
    assert False
-->

```
E       assert False
```

```yaml
unmarked: true
```
'''


def test_a_doc_is_read_into_blocks_that_say_how_they_run(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(DOC)
    skipped, fragment, collection, hidden, unmarked = blocks_of(page)
    assert skipped.skip_reason == "a CI system's workflow file"
    assert (fragment.kind, fragment.setup) == ("guest-fragment",
                                               'before = guest.fs_snapshot("/tmp")\n')
    assert (collection.kind, collection.project_path) == ("file", "checks/checks.py")
    assert hidden.kind == "test" and hidden.invisible
    assert hidden.shown_failure == "E       assert False\n"
    with pytest.raises(ValueError, match=r'page.md:\d+: no way to run a .yaml. block.*skip: next'):
        unmarked.kind  # noqa: B018


def test_a_skip_marker_needs_a_quoted_reason(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("<!-- skip: next -->\n```sh\ntrue\n```\n")
    with pytest.raises(ValueError, match='skip: next "reason"'):
        blocks_of(page)


def test_a_bare_comparison_is_a_claim_that_runs_as_an_assert() -> None:
    code = claims_as_asserts("x = 1\nx == 2\n")
    with pytest.raises(AssertionError, match="the doc claims x == 2"):
        exec(code, {})
    assert claims_as_asserts("print(1)\n") == "print(1)\n"
