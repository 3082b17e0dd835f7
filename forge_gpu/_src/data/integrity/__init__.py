"""Whether a run is whole and how to make it so: inspect (a summary and its checks), verify (every block and
episode), repair (close a killed run, salvage a damaged one)."""
