"""Demonstration generation (``forge_gpu.recording`` serves its names): ``sources`` (the source episodes cut into
the task's subtasks), ``follower`` (the policy that follows transformed segments; its kernel is
``forge_gpu.kernels.generate``), ``generation`` (``Generation``: blocks of keyed attempts and the runs they are written
as), ``run`` (``generate``: the first N successful attempts by index) and ``distributed`` (the same on Ray)."""
