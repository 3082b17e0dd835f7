"""Run formats: the registry on top, the packed layout (schema 2) and npz (schema 1) beneath it."""
