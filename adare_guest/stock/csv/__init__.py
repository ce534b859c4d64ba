"""Directory of the stock ``csv`` collection (loaded from its file, never imported)."""
