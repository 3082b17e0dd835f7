"""Collection: the transport, the collector and the distributed collector, replay, and the encode stage.

The simulation half of ``forge_gpu.recording``: it steps a :class:`VectorEnv` (Warp, Newton) and hands
the host batches to a recorder. The data half (``_src/recording``: the recorder base, the tracker, the
statistics) never imports Warp.
"""
