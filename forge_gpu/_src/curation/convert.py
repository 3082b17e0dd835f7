"""Convert a run between formats (:mod:`formats.registry`: the packed layout, schema 2, docs/FORMAT.md; npz,
schema 1, docs/FORMAT-v1.md; or a registered one), on the writing of a new run that the curation commands share
(:mod:`data.curation.writing`).

Every episode is read and checked, then written unchanged: the episodes of the new run read back equal,
bit for bit, to those of the old one, their state and params too where the new format stores them (packed does,
schema 1 does not), and each episode's instruction. The new run is written into a temporary directory beside ``out``
and renamed to ``out`` only when complete. numpy, pyarrow and the standard library.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from forge_gpu._src.core.dataset import is_dataset
from forge_gpu._src.core.episode import EpisodeReadOptions
from forge_gpu._src.curation.writing import (
    check_target,
    codec_request,
    new_manifest,
    now,
    open_closed_run,
    write_run,
)
from forge_gpu._src.formats.packed.layout import CODECS, stored_codecs
from forge_gpu._src.formats.registry import FORMATS, check_codecs, format_of


def convert_run(
    run_dir: str | os.PathLike,
    out: str | os.PathLike,
    *,
    to: str,
    compression: str = "none",
    codecs: Mapping[str, Any] | None = None,
) -> dict:
    """Write the episodes of the closed run ``run_dir`` as a new run ``out`` in format ``to``
    (``"packed"``, ``"npz"`` or a registered format); return ``{"episodes": count, "out": out}``.

    ``compression``: one of the format's (packed ``none``, ``lz4`` or ``zstd``; npz ``none`` or ``deflate``).
    ``codecs`` (packed): image field -> codec (``*``: every image field not named; ``none``: raw), as
    ``RecordingOptions.codecs``; a field named nowhere keeps the source's codec (raw where it has none). A field
    whose codec does not change keeps its payloads, copied as stored (nothing decoded); the others' frames are
    decoded and encoded again: a lossless codec keeps every bit, a lossy one loses again.
    Raises ValueError for bad arguments, a run that is still recording, or invalid data; FileExistsError when
    ``out`` exists. Nothing is left at ``out`` unless the conversion completed.
    """
    check_target(to, compression)
    check_codecs(codecs or {}, to)
    run_dir, out = os.fspath(run_dir), os.fspath(out)
    if is_dataset(run_dir):
        raise ValueError(f"{run_dir} is a dataset root; convert its runs one by one")
    run = open_closed_run(run_dir)
    source = {
        "run_id": run.manifest["run_id"],
        "path": os.path.abspath(run_dir),
        "format": format_of(run.manifest).name,
        "at": now(),
    }
    # The env_spec describes the state and params the new run stores (packed: the source's; schema 1: none).
    manifest = new_manifest(run.manifest, to, converted_from=source)
    kept = _kept_codecs(run.manifest, codecs, format_of(run.manifest).name, to)
    options = EpisodeReadOptions(state=True)
    ks = list(range(len(run)))
    episodes = run.read(ks, options, encoded=kept) if kept else run.read(ks, options)
    count = write_run(out, manifest, episodes, to=to, compression=compression, codecs=codecs, carried_from=run_dir)
    return {"episodes": count, "out": out}


def _kept_codecs(source: dict, codecs: Mapping[str, Any] | None, source_format: str, to: str) -> tuple[str, ...]:
    """The encoded fields of run.json ``source`` whose codec the new run keeps (both formats store codecs: their
    reader gives a field's payloads as stored, ``read(..., encoded=...)``, and their writer copies them)."""
    if not (FORMATS[source_format].capabilities.codecs and FORMATS[to].capabilities.codecs):
        return ()
    request = codec_request(source.get(CODECS, {}), codecs, to)
    stored = {c.removeprefix("obs/"): spec for c, spec in stored_codecs(source, name="run.json").items()}
    return tuple(f for f, spec in stored.items() if request.get(f, request["*"]) == spec)
