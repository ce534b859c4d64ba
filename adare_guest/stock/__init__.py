"""Stock test-function collections shipped with the agent.

``standard/standard.py`` is the collection ``standard``: it is available to
``run_test`` without any upload (see :mod:`adare_guest.testfunctions`). It is
loaded from its file like an uploaded collection, never imported as
``adare_guest.stock.standard``.
"""
