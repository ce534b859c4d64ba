"""pytest plugin entry point (``pytest11: adare``)."""
