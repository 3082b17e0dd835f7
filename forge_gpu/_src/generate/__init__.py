"""Demonstration generation (``forge_gpu.recording`` serves its names): ``sources`` (the source episodes cut into
the task's subtasks), ``follower`` (the policy that follows transformed segments; its kernel is
``forge_gpu.kernels.generate``) and ``run`` (``generate``: the first N successful attempts by index, written as a
run with their traces)."""
