"""What this machine does for collection: ``doctor`` (is the device, its driver and the captured step as
designed?) and ``precompile`` (Warp's kernel cache built ahead of time, for CUDA archs and the CPU)."""
