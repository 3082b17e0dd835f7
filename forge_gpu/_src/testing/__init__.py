"""What ``forge_gpu.testing`` serves: runs without a simulator (``synthetic``), for the tests and benchmarks of the
recorders and readers. On the data side: it imports core and recording, never a simulator."""
