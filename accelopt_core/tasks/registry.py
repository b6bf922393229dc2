"""Tasks by name: `--task silu`, `--task matmul:small`.

Named tasks are reference files in known folders: the bundled examples (`<name>_ref.py` beside the
example kernel) and the NKIBench suite (`nkibench/reference/<name>.py`, kernels in
`nkibench/kernels/`). The engine finds them by path, so it does not depend on the benchmark's code.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass

from .task import Task, TaskError, load_reference

EXAMPLES_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")


@dataclass(frozen=True)
class TaskFiles:
    """Where a named task's reference and baseline kernel live."""

    name: str
    reference: str
    kernel: str


def _nkibench_dir() -> str | None:
    spec = importlib.util.find_spec("nkibench")
    if spec is None or not spec.submodule_search_locations:
        return None
    return next(iter(spec.submodule_search_locations))


def example_kernel_path(name: str) -> str:
    return os.path.join(EXAMPLES_DIR, f"{name}.py")


def all_task_files() -> dict[str, TaskFiles]:
    """Every named task: NKIBench's first, then the bundled examples not shadowed by them."""
    found: dict[str, TaskFiles] = {}
    bench = _nkibench_dir()
    if bench and os.path.isdir(os.path.join(bench, "reference")):
        for entry in sorted(os.listdir(os.path.join(bench, "reference"))):
            if entry.endswith(".py") and not entry.startswith("_"):
                name = entry[:-3]
                found[name] = TaskFiles(name, os.path.join(bench, "reference", entry),
                                        os.path.join(bench, "kernels", entry))
    for entry in sorted(os.listdir(EXAMPLES_DIR)):
        if entry.endswith("_ref.py"):
            name = entry[:-len("_ref.py")]
            found.setdefault(name, TaskFiles(name, os.path.join(EXAMPLES_DIR, entry), example_kernel_path(name)))
    return found


def task_files(name: str) -> TaskFiles:
    base = name.split(":", 1)[0]
    files = all_task_files()
    if base not in files:
        raise TaskError(f"unknown task {base!r}; known tasks: {', '.join(files) or 'none'}")
    return files[base]


def find_task(name: str) -> Task:
    """A task by `name` or `name:variant`, or a TaskError listing what exists."""
    base, _, variant = name.partition(":")
    return load_reference(task_files(base).reference, base, variant or None)
