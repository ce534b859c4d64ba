"""Directory of the stock ``xml`` collection (loaded from its file, never imported)."""
