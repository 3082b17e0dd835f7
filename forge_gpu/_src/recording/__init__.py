"""Format-neutral recording: the episode tracker, the Recorder protocol and base, statistics, progress.

The data half of ``forge_gpu.recording``: it never imports Warp (``_src/collect`` is the simulation half)."""
