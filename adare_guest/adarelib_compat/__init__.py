"""``adarelib`` for collections written for adare: the names they import, mapped to ours.

adare collections start with imports such as::

    from adarelib.testset.api import testfunction, TestContext
    from adarelib.testset.basictest import HostModeCategory
    from adarelib.event.event import TestResult
    from adarelib.constants import StatusEnum

Before a collection loads, :func:`adare_guest.testfunctions.library.install_adarelib_alias`
registers every module listed in :data:`ALIASED_MODULES` under its ``adarelib``
name, so those imports resolve here, from sources and from the agent's zip
bundle alike. Only what test functions use is provided; adare's host-side
machinery (playbooks, YAML tags, attrs/cattrs parameter classes, ``BasicTest``
subclasses) is not.
"""

ALIASED_MODULES = (
    "",
    ".constants",
    ".event",
    ".event.event",
    ".testset",
    ".testset.basictest",
    ".testset.api",
)
"""Suffixes after ``adarelib`` / ``adare_guest.adarelib_compat`` that are aliased."""
