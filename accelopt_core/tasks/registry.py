"""Tasks by name: `--task matmul`. The bundled example tasks live beside their kernels."""

from __future__ import annotations

import os

from .task import Task, TaskError, load_reference

EXAMPLES_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")


def example_kernel_path(name: str) -> str:
    return os.path.join(EXAMPLES_DIR, f"{name}.py")


def task_names() -> list[str]:
    return sorted(f[:-len("_ref.py")] for f in os.listdir(EXAMPLES_DIR) if f.endswith("_ref.py"))


def find_task(name: str) -> Task:
    """A task by name, or a TaskError listing the names that exist."""
    path = os.path.join(EXAMPLES_DIR, f"{name}_ref.py")
    if not os.path.exists(path):
        raise TaskError(f"unknown task {name!r}; known tasks: {', '.join(task_names()) or 'none'}")
    return load_reference(path, name)
