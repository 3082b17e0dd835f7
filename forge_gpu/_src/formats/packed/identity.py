"""The packed layout's identity, in one place: the run.json keys that mark a packed run, its compressions and
its file names. The standard library only: the format registry and the command line read it without numpy
or pyarrow."""

import re

#: The run.json keys that mark a packed run.
IDENTITY = {"schema_version": 2, "layout": "packed"}
SCHEMA_VERSION = IDENTITY["schema_version"]
#: The revision of the packed layout this code writes and the newest it reads (run.json's ``layout_version``; a
#: run without one is of revision 1): 2 added the ``state/`` columns and the commit lines' ``episodes.params``; 3 the
#: blocks' checksums (``crc32c`` in every commit line) and each block's copy of its line's episodes; 4 every
#: episode's instruction (``episodes.instruction``); 5 encoded image columns (a binary column, one payload per frame,
#: its codec in the field's metadata and in run.json's ``codecs``).
LAYOUT_VERSION = 5
#: The first revision whose blocks carry checksums; a run of an older one is read unverified.
CHECKSUMS_VERSION = 3
#: The first revision whose commit lines hold each episode's instruction; in an older one every episode has the run's.
INSTRUCTIONS_VERSION = 4
#: The first revision whose image columns may be encoded.
CODECS_VERSION = 5
#: Arrow IPC buffer compressions, the first one the default.
COMPRESSIONS = ("none", "lz4", "zstd")
COMMIT_LOG = "commits.jsonl"
SEGMENT_NAME = "segment-{index:06d}.arrows"
SEGMENT_RE = re.compile(r"^segment-(\d{6})\.arrows$")


def segment_name(index: int) -> str:
    """The file name of segment ``index``."""
    return SEGMENT_NAME.format(index=index)


def layout_version(manifest: dict, *, name: str) -> int:
    """The packed layout revision of a run.json (1 where it names none); ValueError naming the file for one this
    reader does not know, a newer one included (docs/FORMAT.md "Versions")."""
    version = manifest.get("layout_version", 1)
    if type(version) is not int or version < 1:
        raise ValueError(f"{name}: layout_version must be an integer >= 1, got {version!r}")
    if version > LAYOUT_VERSION:
        raise ValueError(
            f"{name}: layout_version {version} is newer than this reader reads (up to {LAYOUT_VERSION}); "
            "read the run with a newer forge_gpu"
        )
    return version
