"""DV serial frame codec (DESIGN §4): pure, sans-I/O."""
