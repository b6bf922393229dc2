"""What one profiling job asks for, independent of how it travels (HTTP, a worker pipe, a Ray task).

A job names its task either by name (resolved on the host that evaluates it) or carries the
reference's source text, because the client's file is not on the service's disk. Everything here is
plain data so it pickles into worker processes and Ray tasks without FastAPI installed.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from dataclasses import asdict, dataclass, field
from typing import Any

from ..hardware import available_hardware
from ..nki.loader import check_source, parse_source
from ..profiling.sandbox import SandboxLimits

SAFE_FILE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,120}\.py$")
TASK_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}(:[A-Za-z0-9_-]{1,64})?$")


class SpecError(ValueError):
    """The job cannot be evaluated as given (bad kernel source, unknown task); the message says why."""


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class JobSpec:
    """One evaluation request: kernel source, task (name or reference text), hardware, check."""

    kernel: str
    task: str | None = None
    reference: str | None = None
    reference_name: str | None = None  # file name of the client's reference; names the task in results
    reference_variant: str | None = None  # a size variant the reference defines (None: its first)
    hardware: str = "trn1"
    check: bool = True
    kernel_name: str | None = None
    kernel_label: str = "candidate.py"  # how error messages name the kernel file
    check_variant: str | None = None
    seeds: tuple[int, ...] | None = None  # explicit seeds make a job uncacheable
    grid: tuple[int, ...] | None = None  # SPMD launch grid instead of the reference's own

    def task_key(self) -> str:
        if self.task:
            return f"task:{self.task}"
        variant = f":{self.reference_variant}" if self.reference_variant else ""
        return f"ref:{sha256_text(self.reference or '')}:{self.reference_name or ''}{variant}"

    def cache_key(self, backend: str) -> str | None:
        """Content hash of everything that decides the result; None when the job must not be cached."""
        if self.seeds is not None:
            return None
        parts = {"kernel": sha256_text(self.kernel), "task": self.task_key(), "hardware": self.hardware,
                 "backend": backend, "check": self.check, "kernel_name": self.kernel_name,
                 "kernel_label": self.kernel_label, "check_variant": self.check_variant,
                 "grid": list(self.grid) if self.grid is not None else None}
        return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["seeds"] = list(self.seeds) if self.seeds is not None else None
        data["grid"] = list(self.grid) if self.grid is not None else None
        return data


def validate_spec(spec: JobSpec) -> None:
    """Reject, without running anything, what cannot be evaluated: raises SpecError."""
    if (spec.task is None) == (spec.reference is None):
        raise SpecError("give exactly one of `task` (a name) or `reference` (source text)")
    if spec.reference_variant is not None and spec.reference is None:
        raise SpecError("`reference_variant` names a size of a `reference`; a named task takes it as `name:variant`")
    if spec.hardware not in available_hardware():
        raise SpecError(f"unknown hardware {spec.hardware!r}; use one of {', '.join(available_hardware())}")
    try:
        check_source(spec.kernel, spec.kernel_label, spec.kernel_name)
    except Exception as exc:  # KernelLoadError, or the parser giving up on pathological input
        raise SpecError(f"kernel: {exc}") from None
    if spec.reference is not None:
        try:
            parse_source(spec.reference, spec.reference_name or "reference.py")
        except SyntaxError as exc:
            raise SpecError(f"reference:{exc.lineno}: syntax error: {exc.msg}") from None
        except Exception as exc:
            raise SpecError(f"reference: cannot be parsed: {type(exc).__name__}") from None
    if spec.task is not None:
        if not TASK_NAME.match(spec.task):
            raise SpecError(f"task name {spec.task!r} is not of the form NAME or NAME:VARIANT")
        from ..tasks import TaskError
        from ..tasks.registry import task_files

        try:
            task_files(spec.task)
        except TaskError as exc:
            raise SpecError(str(exc)) from None


def safe_file_name(name: str | None, default: str) -> str:
    """A bare file name safe to create in a private folder (no directories, no surprises)."""
    base = os.path.basename(name or "")
    return base if SAFE_FILE_NAME.match(base) else default


def private_directory(prefix: str) -> str:
    """A fresh directory only this user can read (references may be confidential)."""
    return tempfile.mkdtemp(prefix=prefix)


def materialize_reference(source: str, name: str | None, root: str) -> str:
    """Write reference source text to `root/<hash>/<name>` (once) and return the path.

    The hash keeps one file per distinct reference, so a worker's task cache and the sandbox's
    forbidden-path list stay stable across the jobs that share it."""
    folder = os.path.join(root, sha256_text(source)[:32])
    path = os.path.join(folder, safe_file_name(name, "reference.py"))
    if os.path.exists(path):
        return path
    os.makedirs(folder, mode=0o700, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=folder, suffix=".part")
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(source)
    os.replace(temporary, path)
    return path


@dataclass(frozen=True)
class EvaluatorConfig:
    """How a worker (process or Ray task) builds its profiler; frozen so it can key a cache."""

    backend: str = "simulator"  # "simulator" or "neuron"
    seeds: int = 5
    limits: SandboxLimits = field(default_factory=SandboxLimits)
    refs_root: str | None = None  # None: a private temporary folder per worker
    forbidden_paths: tuple[str, ...] = ()
    neuron_options: tuple[tuple[str, Any], ...] = ()  # keyword arguments for NeuronProfiler
