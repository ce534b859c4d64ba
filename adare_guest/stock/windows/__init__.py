"""Directory of the stock ``windows`` collection (loaded from its file, never imported)."""
