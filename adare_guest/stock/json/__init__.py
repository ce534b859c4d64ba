"""Directory of the stock ``json`` collection (loaded from its file, never imported)."""
