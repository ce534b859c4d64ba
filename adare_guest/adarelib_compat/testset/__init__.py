"""``adarelib.testset``: the decorator, the context and the verdict exceptions."""

from adare_guest.adarelib_compat.testset.api import TestContext, TestError, TestFailed, testfunction
from adare_guest.adarelib_compat.testset.basictest import HostModeCategory

__all__ = ["HostModeCategory", "TestContext", "TestError", "TestFailed", "testfunction"]
