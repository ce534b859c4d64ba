"""The example scenarios on the XFCE desktop (debian-xfce): the playbooks, the Thunar and
Mousepad experiments and their tool validation, one inner run sharing one desktop VM.
The other examples run in tests/e2e/test_plugin_e2e.py; its own module, so the two
xdist workers run both at once."""

from __future__ import annotations

import pytest

from tests.e2e.test_plugin_e2e import EXAMPLES, INNER_TIMEOUT, XFCE_EXAMPLES
from tests.inner_run import run_inner_pytest

pytestmark = pytest.mark.e2e


def test_the_xfce_examples_pass(pytester: pytest.Pytester, test_image: str) -> None:
    result = run_inner_pytest(
        pytester,
        "-p", "no:cacheprovider", "-rs", f"--adare-vm={test_image}",
        *[str(EXAMPLES / name) for name in XFCE_EXAMPLES],
        timeout=INNER_TIMEOUT,
    )  # fmt: skip
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed", 0) == 0 and outcomes.get("errors", 0) == 0, result.stdout.str()
    # two playbooks, three XFCE experiments, three tool validations
    assert outcomes.get("passed", 0) == 8, result.stdout.str()
