"""What a kernel is checked against: inputs, a reference, a tolerance and (optionally) a peak."""

from .task import Case, PeakWork, Task, TaskError, load_reference

__all__ = ["Case", "PeakWork", "Task", "TaskError", "load_reference"]
