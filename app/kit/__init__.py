"""Small helpers several packages share and that belong to none: the log sink, where the non-Python files
live, duration formatting."""
