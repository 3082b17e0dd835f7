"""What serves forge_gpu.reading: runs and their episodes, training windows, the torch datasets, and what checks or
shows a run (inspect, verify, report, view)."""
