"""Directory of the stock ``jsonl`` collection (loaded from its file, never imported)."""
