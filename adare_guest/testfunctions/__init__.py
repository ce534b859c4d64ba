"""Test functions: small checks that run inside the guest and report a verdict.

A *collection* is a directory ``D`` holding ``D/D.py``; every function in it
decorated with :func:`testfunction` is a test named ``D.<name>``::

    # checks/checks.py
    from adare_guest.testfunctions import TestContext, testfunction

    @testfunction(description="the report was written")
    def report_written(ctx: TestContext, path: str) -> str:
        ctx.fail_if(not os.path.exists(path), f"{path} is missing")
        ctx.warn_if(os.path.getsize(path) == 0, f"{path} is empty")
        return f"{path} exists"

Verdicts (:class:`TestStatus`): ``ctx.fail_if`` → FAILED, ``ctx.error_if`` →
ERROR (the check could not be made), ``ctx.warn_if`` → WARNING (the test goes
on), a plain ``assert`` → FAILED, any other exception → ERROR with the
traceback. Otherwise SUCCESS, and the return value (``None``, a ``str`` or a
list) becomes the details.

The package: :mod:`.functions` (the decorator, the context, running one function;
this module re-exports its public names), :mod:`.library` (loading collections and
giving adare-style functions adare's ``ctx``; it sits above :mod:`.functions` and
:mod:`adare_guest.adarelib_compat`) and :mod:`.run_request` (a ``run_test`` request
in our form or adare's).

Parameters may hold ``{{ name }}`` placeholders (:mod:`adare_guest.placeholders`):
placeholders compared as plain text are substituted before the function runs;
regex and tolerance placeholders are left for the check, which compares with
``ctx.matches(actual, expected)``.
"""

from __future__ import annotations

# The public names are functions.py's own ``__all__``: one list to keep.
from adare_guest.testfunctions import functions as _functions
from adare_guest.testfunctions.functions import *  # noqa: F403

__all__ = list(_functions.__all__)
