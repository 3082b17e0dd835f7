"""The npz layout (schema 1, docs/FORMAT-v1.md)."""
