"""The packed layout (schema 2, docs/FORMAT.md)."""
