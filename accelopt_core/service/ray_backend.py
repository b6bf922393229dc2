"""Ray: profile jobs as Ray tasks on a cluster of Trainium hosts.

Each task asks for one unit of the custom resource `neuron_core` (start each node with
`ray start --resources='{"neuron_core": N}'`, N = its NeuronCores), so Ray runs at most N evaluations
per host at once. On the host, a task claims a free core index with a lock file and, on the Neuron
backend, gives the sandboxed child `NEURON_RT_VISIBLE_CORES=<index>`.

`RayRunner` is the service's executor for `--ray ADDRESS`; `RayProfiler` lets the search submit its
evaluations straight to Ray without the HTTP service. Ray is imported only when one is used.
"""

from __future__ import annotations

import contextlib
import copy
import fcntl
import os
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any, Self

from ..profiling import ProfileResult, SandboxLimits, TaskRef
from ..profiling.sandbox import CANCELLED
from ..tasks.declared import default_task_name
from .evaluate import Evaluator, Outcome
from .spec import EvaluatorConfig, JobSpec

RESOURCE = "neuron_core"
_evaluators: dict[tuple[EvaluatorConfig, str | None], Evaluator] = {}
_remote_function: Any = None


def _ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise ImportError("Ray is not installed: pip install 'ray>=2'") from exc
    return ray


@contextlib.contextmanager
def claim_core(limit: int = 256) -> Iterator[int]:
    """Hold the lowest free NeuronCore index on this host for the duration of the block.

    Ray admits at most `neuron_core` tasks per node, so a free index below that count exists."""
    folder = os.path.join(tempfile.gettempdir(), "accelopt-neuron-cores")
    os.makedirs(folder, exist_ok=True)
    for index in range(limit):
        handle = open(os.path.join(folder, f"core-{index}.lock"), "a")  # noqa: SIM115 - held across the yield
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            continue
        try:
            yield index
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
            handle.close()
        return
    raise RuntimeError(f"no free NeuronCore index below {limit} on this host")


def evaluate_in_task(spec: JobSpec, config: EvaluatorConfig) -> Outcome:
    """Body of the Ray task: evaluate on a claimed core; a non-forced ray.cancel stops the sandbox."""
    with claim_core() as core:
        visible = str(core) if config.backend == "neuron" else None
        key = (config, visible)
        if key not in _evaluators:
            _evaluators[key] = Evaluator(config, visible)
        cancel = threading.Event()
        box: dict[str, Outcome] = {}
        thread = threading.Thread(target=lambda: box.setdefault("outcome", _evaluators[key].run(spec, cancel)),
                                  daemon=True)
        thread.start()
        try:
            while thread.is_alive():
                thread.join(0.2)
        except KeyboardInterrupt:  # how Ray delivers a cancellation to a running task
            cancel.set()
            thread.join(30.0)
            raise
        return box.get("outcome") or Outcome("error", message="the evaluation thread ended without an outcome")


def _remote() -> Any:
    global _remote_function
    if _remote_function is None:
        _remote_function = _ray().remote(evaluate_in_task)
    return _remote_function


def _crash_types(ray: Any) -> tuple[type[BaseException], ...]:
    names = ("WorkerCrashedError", "NodeDiedError", "LocalRayletDiedError", "ObjectLostError", "OwnerDiedError")
    return tuple(getattr(ray.exceptions, n) for n in names if hasattr(ray.exceptions, n))


def run_ray_task(spec: JobSpec, config: EvaluatorConfig, cancel: threading.Event | None = None,
                 resources: dict[str, float] | None = None, num_cpus: float = 1.0,
                 timeout: float | None = None) -> Outcome:
    """Submit one evaluation as a Ray task and wait for it, cancelling it when `cancel` is set."""
    ray = _ray()
    ref = _remote().options(resources=resources or {RESOURCE: 1}, num_cpus=num_cpus, max_retries=0,
                            retry_exceptions=False).remote(spec, config)
    deadline = time.monotonic() + timeout if timeout else None
    cancelled_at: float | None = None
    while True:
        ready, _ = ray.wait([ref], timeout=0.2)
        if ready:
            break
        now = time.monotonic()
        if cancel is not None and cancel.is_set() and cancelled_at is None:
            ray.cancel(ref)  # KeyboardInterrupt in the task, which stops its sandboxed child
            cancelled_at = now
        elif cancelled_at is not None and now - cancelled_at > 15.0:
            ray.cancel(ref, force=True)
            return Outcome("cancelled", message=CANCELLED)
        if deadline is not None and now > deadline:
            ray.cancel(ref, force=True)
            return Outcome("timeout", message=f"the Ray task did not finish within {timeout:g} s")
    try:
        outcome = ray.get(ref)
    except ray.exceptions.TaskCancelledError:
        return Outcome("cancelled", message=CANCELLED)
    except _crash_types(ray) as exc:
        return Outcome("died", message=f"the Ray worker running this job died: {type(exc).__name__}: {exc}"[:2000])
    except ray.exceptions.RayTaskError as exc:
        if cancelled_at is not None:
            return Outcome("cancelled", message=CANCELLED)
        return Outcome("error", message=f"the Ray task failed: {exc}"[:2000])
    return outcome if isinstance(outcome, Outcome) else Outcome("error", message="the Ray task returned no outcome")


def connect(address: str | None, **init_kwargs: Any) -> Any:
    """Join the cluster at `address` (or reuse the connection this process already has)."""
    ray = _ray()
    if not ray.is_initialized():
        ray.init(address=address, **init_kwargs)
    return ray


class RayRunner:
    """The service's executor for `--ray`: each slot keeps one Ray task in flight."""

    kind = "ray"

    def __init__(self, address: str | None, config: EvaluatorConfig, slots: int | None = None,
                 num_cpus: float = 1.0, job_timeout: float | None = None):
        self.address = address
        self.config = config
        self.slots = slots or 0
        self.num_cpus = num_cpus
        self.job_timeout = job_timeout if job_timeout is not None else config.limits.longest_evaluation()
        self._busy: list[bool] = []

    def start(self) -> None:
        ray = connect(self.address)
        total = int(ray.cluster_resources().get(RESOURCE, 0))
        if total < 1:
            raise RuntimeError(f"the Ray cluster has no `{RESOURCE}` resource: start each node with "
                               f"ray start --resources='{{\"{RESOURCE}\": N}}' (N = its NeuronCores)")
        self.slots = self.slots or total
        self._busy = [False] * self.slots

    def stop(self) -> None:
        return None  # the cluster belongs to its operator; we only leave it

    def run(self, slot: int, spec: JobSpec, cancel: threading.Event) -> Outcome:
        self._busy[slot] = True
        try:
            return run_ray_task(spec, self.config, cancel, num_cpus=self.num_cpus, timeout=self.job_timeout)
        finally:
            self._busy[slot] = False

    def describe(self) -> list[dict[str, Any]]:
        return [{"slot": slot, "pid": None, "alive": True, "busy": busy, "restarts": 0, "neuron_core": None}
                for slot, busy in enumerate(self._busy)]


class RayProfiler:
    """A `Profiler` whose evaluations run as Ray tasks (one `neuron_core` each): the search's
    parallel evaluation can fan out over a Ray cluster of Trainium hosts directly.

    A task whose worker dies is retried once. Results are cached by content hash like the service's."""

    backend = "ray"

    def __init__(self, address: str | None = "auto", backend: str = "simulator", seeds: int = 5,
                 check_variant: str | None = None, limits: SandboxLimits | None = None,
                 neuron_options: dict[str, Any] | None = None, num_cpus: float = 1.0, retries: int = 1,
                 timeout: float | None = None, cache: Any = None, init_kwargs: dict[str, Any] | None = None):
        self.address = address
        self.check_variant = check_variant
        self.config = EvaluatorConfig(backend=backend, seeds=seeds, limits=limits or SandboxLimits(),
                                      neuron_options=tuple(sorted((neuron_options or {}).items())))
        self.num_cpus = num_cpus
        self.retries = retries
        self.timeout = timeout
        self.cache = cache if cache is not None else {}
        self.init_kwargs = dict(init_kwargs or {})

    def at_timed_size(self) -> Self | None:
        """This profiler checking on one fresh seed at the size it times, as CheckingProfiler's does (the
        search keeps only kernels checked at the size they were timed); shares the cache."""
        if not self.check_variant:
            return None
        timed = copy.copy(self)
        timed.check_variant, timed.config = None, replace(self.config, seeds=1)
        return timed

    def profile(self, kernel_source: str, task: TaskRef, hardware: str = "trn1", check: bool = True,
                seeds: Sequence[int] | None = None, kernel_label: str = "candidate.py",
                kernel_name: str | None = None, cancel: threading.Event | None = None) -> ProfileResult:
        task_name = task.name or default_task_name(task.reference or "")
        failed = ProfileResult(kernel_label, task_name, hardware, self.config.backend, function=kernel_name)
        try:
            reference = None
            if task.reference:
                with open(task.reference, encoding="utf-8") as handle:
                    reference = handle.read()
        except OSError as exc:
            failed.error = f"cannot read reference {task.reference}: {exc.strerror}"
            return failed
        spec = JobSpec(kernel=kernel_source, task=None if reference is not None else task.name, reference=reference,
                       reference_name=os.path.basename(task.reference) if task.reference else None,
                       reference_variant=task.variant if reference is not None else None,
                       hardware=hardware, check=check, kernel_name=kernel_name,
                       kernel_label=os.path.basename(kernel_label) or "candidate.py",
                       check_variant=self.check_variant, seeds=tuple(seeds) if seeds is not None else None,
                       grid=task.grid)
        key = spec.cache_key(self.config.backend)
        if key is not None and key in self.cache:
            return ProfileResult.from_dict(self.cache[key])
        connect(self.address, **self.init_kwargs)
        for attempt in range(self.retries + 1):
            outcome = run_ray_task(spec, self.config, cancel, num_cpus=self.num_cpus, timeout=self.timeout)
            if outcome.kind != "died" or attempt == self.retries:
                break
        if outcome.kind != "result" or outcome.result is None:
            failed.error = CANCELLED if outcome.kind == "cancelled" else outcome.message
            return failed
        result = ProfileResult.from_dict(outcome.result)
        result.kernel = kernel_label
        if key is not None and (result.error is None or result.error_line is not None):
            self.cache[key] = outcome.result
        return result
