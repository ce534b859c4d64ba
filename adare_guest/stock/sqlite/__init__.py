"""Directory of the stock ``sqlite`` collection (loaded from its file, never imported)."""
