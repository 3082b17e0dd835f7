"""The recording's own progress over time, kept by every recorder and written into run.json's ``progress`` at close
(docs/FORMAT.md, "run.json"): a bounded table of samples, at most one per ``every_seconds``, taken when a writer
publishes (so never per env, never per step). When the table is full every other sample is dropped and the interval
doubles, so a run of any length keeps at most ``MAX_ROWS`` samples evenly spread over it, and one more
taken at close. The standard library only.
"""

from __future__ import annotations

import time

#: What each sample holds, in order: seconds since the recorder was made, then the recorder's counters at that time
#: (episodes and transitions published, bytes written, total seconds ``append`` waited for the writers, and the
#: backlog: batches (packed) or episodes (npz) handed to the writers and not yet published).
PROGRESS_COLUMNS = ("seconds", "episodes", "transitions", "bytes", "stall_seconds", "backlog")
#: The most samples kept; the bytes run.json's ``progress`` takes at most are ``(MAX_ROWS + 1) * ROW_BYTES``
#: (indented JSON, one number a line).
MAX_ROWS = 256
ROW_BYTES = 160
FIRST_EVERY_SECONDS = 1.0


class ProgressSeries:
    """Samples of a recorder's counters over time, bounded (see the module docstring). Not thread-safe: the
    recorder calls it under its lock."""

    def __init__(self, *, every: float = FIRST_EVERY_SECONDS, max_rows: int = MAX_ROWS):
        if every <= 0 or max_rows < 2:
            raise ValueError(f"every must be > 0 and max_rows >= 2, got every={every!r}, max_rows={max_rows!r}")
        self._start = time.monotonic()
        self._every = float(every)
        self._max_rows = max_rows
        self._rows: list[list] = []
        self._due = 0.0  # the first publish is sampled

    def sample(self, episodes: int, transitions: int, nbytes: int, stall_seconds: float, backlog: int) -> None:
        """Keep the counters as they are now, unless the last sample is less than ``every_seconds`` old."""
        now = time.monotonic() - self._start
        if now < self._due:
            return
        row = [round(now, 3), int(episodes), int(transitions), int(nbytes), round(stall_seconds, 3), int(backlog)]
        self._rows.append(row)
        self._due = now + self._every
        if len(self._rows) > self._max_rows:
            self._rows = self._rows[1::2]  # every other one, the latest kept
            self._every *= 2

    def to_json(self, final: tuple | None = None) -> dict:
        """run.json's ``progress``; ``final`` (the counters at close, as :meth:`sample` takes them) ends the table."""
        rows = list(self._rows)
        if final is not None:
            episodes, transitions, nbytes, stall, backlog = final
            now = round(time.monotonic() - self._start, 3)
            row = [now, int(episodes), int(transitions), int(nbytes), round(stall, 3), int(backlog)]
            rows.append(row)
        return {"every_seconds": self._every, "columns": list(PROGRESS_COLUMNS), "rows": rows}


def aggregate(counters: list[dict | None]) -> dict | None:
    """One progress dict (the shape ``collect`` reports) over the latest counters of every worker."""
    seen = [c for c in counters if c]
    if not seen:
        return None
    elapsed = sum(c["seconds"] for c in seen)
    return {
        "episodes_ended": sum(c["episodes_ended"] for c in seen),
        "episodes_published": sum(c["episodes_published"] for c in seen),
        "target": sum(c["target"] for c in seen),
        "unit": seen[0]["unit"],
        "steps": sum(c["steps"] for c in seen),
        "env_steps": sum(c["env_steps"] for c in seen),
        "seconds": max(c["seconds"] for c in seen),
        "env_steps_per_s": sum(c["env_steps_per_s"] for c in seen),
        "stall_fraction": sum(c["stall_fraction"] * c["seconds"] for c in seen) / elapsed if elapsed > 0 else 0.0,
        "backlog": sum(c["backlog"] for c in seen),
        "bytes_written": sum(c["bytes_written"] for c in seen),
        "workers_reporting": len(seen),
    }
