"""The example scenarios on the XFCE desktop (debian-xfce): the playbooks, the Thunar and
Mousepad experiments and their tool validation, one inner run sharing one desktop VM.
The other examples run in tests/e2e/test_plugin_e2e.py; its own module, so the two
xdist workers run both at once."""

from __future__ import annotations

import pytest

from tests.e2e.test_plugin_e2e import EXAMPLES, XFCE_EXAMPLES, run_examples

pytestmark = pytest.mark.e2e


def test_the_xfce_examples_pass(pytester: pytest.Pytester, test_image: str) -> None:
    # two playbooks, three XFCE experiments, three tool validations
    assert run_examples(pytester, test_image, *[str(EXAMPLES / n) for n in XFCE_EXAMPLES]) == 8
