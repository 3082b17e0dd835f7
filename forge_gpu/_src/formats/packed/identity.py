"""The packed layout's identity, in one place: the run.json keys that mark a packed run, its compressions and
its file names. The standard library only: the format registry and the command line read it without numpy
or pyarrow."""

import re

#: The run.json keys that mark a packed run.
IDENTITY = {"schema_version": 2, "layout": "packed"}
SCHEMA_VERSION = IDENTITY["schema_version"]
#: Arrow IPC buffer compressions, the first one the default.
COMPRESSIONS = ("none", "lz4", "zstd")
COMMIT_LOG = "commits.jsonl"
SEGMENT_NAME = "segment-{index:06d}.arrows"
SEGMENT_RE = re.compile(r"^segment-(\d{6})\.arrows$")


def segment_name(index: int) -> str:
    """The file name of segment ``index``."""
    return SEGMENT_NAME.format(index=index)
