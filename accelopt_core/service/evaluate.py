"""Running one job on the host that owns the hardware: shared by the service's worker processes,
Ray tasks and `RayProfiler`, so every path evaluates a job the same way."""

from __future__ import annotations

import logging
import shutil
import threading
import traceback
import weakref
from dataclasses import dataclass
from typing import Any

from ..engine import NEURON, SIMULATOR, ProfilerSettings, make_profiler
from ..profiling import Profiler, TaskRef
from ..profiling.sandbox import CANCELLED
from ..tasks import TaskError
from .spec import EvaluatorConfig, JobSpec, materialize_reference, private_directory, safe_file_name

log = logging.getLogger("accelopt.service")

# run_sandboxed's wording when the evaluation's child died from a signal (crash, OOM killer, kill -9)
CHILD_KILLED = "worker process was killed by signal"


@dataclass
class Outcome:
    """How one attempt ended: "result" (a ProfileResult dict), "error" (the job itself is unusable),
    "died" (the process running it vanished), "cancelled" or "timeout"."""

    kind: str
    result: dict[str, Any] | None = None
    message: str | None = None

    @property
    def child_killed(self) -> bool:
        error = (self.result or {}).get("error") or ""
        return self.kind == "result" and CHILD_KILLED in error


class _NoCache(dict):
    """The service caches results itself; a profiler inside a worker must not keep a second copy."""

    def __setitem__(self, key: Any, value: Any) -> None:
        return None


class Evaluator:
    """Builds one profiler per check variant and evaluates jobs with it."""

    def __init__(self, config: EvaluatorConfig, visible_cores: str | None = None):
        self.config = config
        self.visible_cores = visible_cores
        self.refs_root = config.refs_root or private_directory("accelopt-refs-")
        # a folder of its own is removed with the evaluator, or at the latest when the process exits:
        # the references clients sent may be confidential
        self._own_refs = None if config.refs_root else weakref.finalize(self, shutil.rmtree, self.refs_root, True)
        self._profilers: dict[str | None, Profiler] = {}

    def close(self) -> None:
        """Remove the references folder this evaluator made (a worker calls it before it exits)."""
        if self._own_refs is not None:
            self._own_refs()

    def _profiler(self, check_variant: str | None) -> Profiler:
        if check_variant not in self._profilers:
            self._profilers[check_variant] = make_profiler(self.profiler_settings(check_variant), _NoCache())
        return self._profilers[check_variant]

    def profiler_settings(self, check_variant: str | None) -> ProfilerSettings:
        """The service's configuration in the engine's terms: this slot's NeuronCore, and the folder of the
        references clients sent, which no kernel may read."""
        if self.config.backend not in (SIMULATOR, NEURON):
            raise ValueError(f"unknown backend {self.config.backend!r}")
        options = dict(self.config.neuron_options)
        if self.config.backend == NEURON and self.visible_cores is not None:
            options["visible_cores"] = self.visible_cores
        return ProfilerSettings(self.config.backend, seeds=self.config.seeds, check_variant=check_variant,
                                limits=self.config.limits, forbidden_paths=(*self.config.forbidden_paths,
                                                                            self.refs_root),
                                neuron_options=tuple(sorted(options.items())))

    def task_ref(self, spec: JobSpec) -> TaskRef:
        if spec.task:
            return TaskRef(name=spec.task, grid=spec.grid)
        return TaskRef(reference=materialize_reference(spec.reference or "", spec.reference_name, self.refs_root),
                       grid=spec.grid, variant=spec.reference_variant)

    def run(self, spec: JobSpec, cancel: threading.Event | None = None) -> Outcome:
        """Evaluate one job; never raises (a failure becomes an "error" outcome with its reason)."""
        try:
            profiler = self._profiler(spec.check_variant)
            result = profiler.profile(spec.kernel, self.task_ref(spec), spec.hardware, spec.check,
                                      seeds=list(spec.seeds) if spec.seeds is not None else None,
                                      # a client's label is a name to show, never a path to look at
                                      kernel_label=safe_file_name(spec.kernel_label, "candidate.py"),
                                      kernel_name=spec.kernel_name, cancel=cancel)
        except TaskError as exc:
            return Outcome("error", message=f"task: {exc}")
        except Exception as exc:
            log.error("evaluation failed inside the worker:\n%s", traceback.format_exc())
            return Outcome("error", message=f"internal error while evaluating: {type(exc).__name__}: {exc}")
        if result.error == CANCELLED or (cancel is not None and cancel.is_set()):
            return Outcome("cancelled", message=CANCELLED)
        return Outcome("result", result=result.to_dict())
