"""Evaluation: a policy scored over exactly N keyed episodes. ``rows`` (the draw keys, counters and per-episode rows
on the device; its kernels are ``forge_gpu.kernels.evaluate``), ``figures`` (success rates with Wilson intervals,
means, bins: numpy alone), ``run`` (the loop: ``evaluate``, with ``--record`` through ``collect``) and
``command`` (what ``forge-gpu evaluate`` prints and writes)."""
