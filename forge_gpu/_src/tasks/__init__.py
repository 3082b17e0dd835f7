"""Task registry: task id -> Task class."""

from .base import Task, TaskSpec
from .cartpole import CartpoleTask

TASKS: dict[str, type[Task]] = {cls.spec.id: cls for cls in (CartpoleTask,)}

__all__ = ["TASKS", "Task", "TaskSpec"]
