"""The npz layout's identity (schema 1, docs/FORMAT-v1.md), in one place: the run.json key that marks it and
its compressions. The standard library only: the format registry and the command line read it without
numpy."""

#: The run.json keys that mark a schema-1 run (schema 1 predates the ``layout`` key).
IDENTITY = {"schema_version": 1}
SCHEMA_VERSION = IDENTITY["schema_version"]
#: Member compressions of the episode archives, the first one the default.
COMPRESSIONS = ("none", "deflate")
#: forge_gpu's file of every episode's instruction beside a schema-1 run's episodes (docs/FORMAT.md "Instructions"),
#: and the run.json key that names it (a run without the key: every episode has the run's instruction).
INSTRUCTIONS_FILE = "instructions.jsonl"
INSTRUCTIONS_KEY = "episode_instructions"
