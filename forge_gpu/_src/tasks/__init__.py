"""Task registry: task id -> Task class."""

from .ant import AntTask
from .base import Task, TaskSpec
from .cartpole import CartpoleTask
from .reach import ReachTask

TASKS: dict[str, type[Task]] = {cls.spec.id: cls for cls in (AntTask, CartpoleTask, ReachTask)}

__all__ = ["TASKS", "Task", "TaskSpec"]
