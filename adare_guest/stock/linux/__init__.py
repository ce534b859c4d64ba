"""Directory of the stock ``linux`` collection (loaded from its file, never imported)."""
