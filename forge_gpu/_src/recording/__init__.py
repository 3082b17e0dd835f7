"""Format-neutral recording: the episode tracker, the Recorder protocol and base, statistics."""
