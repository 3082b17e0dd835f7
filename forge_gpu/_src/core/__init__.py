"""The core: the standard library and numpy only (checks, files, field names and episode rules, run.json)."""
