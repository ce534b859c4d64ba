"""``adarelib.event``: only :mod:`.event` (``TestResult``) is provided."""
