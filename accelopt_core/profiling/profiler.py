"""The `Profiler` interface and its simulator backend.

`profile(kernel_source, task, hardware, check)` checks a kernel against its task and times it.
The kernel runs in a sandboxed child (see sandbox.py) that only records its traces (measure.py);
everything that decides whether it is correct and how fast it is — replaying those traces on the
trusted side's own inputs, the reference outputs, the comparison, the guards against gamed checks,
the performance model (verdict.py) — runs here, in the trusted parent, where the kernel cannot reach
it and where no kernel code ever runs.
"""

from __future__ import annotations

import copy
import hashlib
import importlib.util
import math
import os
import shutil
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, replace
from typing import Any, Protocol, Self, runtime_checkable

import numpy as np

from ..hardware import load_hardware
from ..nki import NkiError, RunResult, TensorSpec
from ..nki.api_versions import detect_version
from ..nki.replay import ReplayLimitError
from ..nki.tape import TapeError, assemble
from ..nki.trace import collector_paused
from ..perfmodel import peak_percent, peak_times
from ..tasks import Case, PeakWork, Task, TaskError, load_reference
from ..tasks.check import compare, fresh_seeds
from ..tasks.registry import find_task, task_files
from .guards import guard_violation
from .handback import MalformedResultError, ParseBudget, check_tape_names, read_tape
from .result import ProfileResult
from .sandbox import MALFORMED, SandboxJob, SandboxLimits, run_sandboxed, sandbox_workdir
from .seeds import SeedJob, SeedVerdict, SeedWorkers, worker_count
from .verdict import Replays, RunPlan, ShapeDriftError, plan_runs, replay_while_recorded, timing_report, trace_facts

UNNAMED = "a TaskRef needs a name or a reference path"


@dataclass(frozen=True)
class TaskRef:
    """A task by name (`silu`, `silu:small`) or by reference file, at one of its size variants (`variant`,
    a reference's as a name's `:small`); picklable, loaded where needed. `grid` launches the kernel on
    that SPMD grid instead of the reference's own (`--grid 2x2`)."""

    name: str | None = None
    reference: str | None = None
    grid: tuple[int, ...] | None = None
    variant: str | None = None  # a reference file's size variant (None: its first)

    def load(self, variant: str | None = None) -> Task:
        if self.reference:
            task = load_reference(self.reference, variant=variant or self.variant)
        elif not self.name:
            raise ValueError(UNNAMED)
        else:
            base = self.name.split(":", 1)[0]
            task = find_task(f"{base}:{variant}" if variant else self.name)
        return replace(task, grid=self.grid) if self.grid is not None else task

    @property
    def key(self) -> str:
        """Identity for caches: the name, or the reference's path and content (an edited reference
        must not be answered from results checked against its old version), and the grid."""
        launch = f"@{'x'.join(map(str, self.grid))}" if self.grid is not None else ""
        if self.name or not self.reference:
            return (self.name or "") + launch
        path = os.path.abspath(self.reference)
        sized = f":{self.variant}" if self.variant else ""
        return f"{path}#{file_digest(path)}{sized}{launch}"

    @property
    def reference_path(self) -> str:
        """The reference file that checks kernels of this task (a named task's from the registry)."""
        if not (self.reference or self.name):
            raise ValueError(UNNAMED)
        return os.path.abspath(self.reference) if self.reference else task_files(self.name or "").reference

    @property
    def identity(self) -> str:
        """`key` with the content of the reference file folded in, for a named task too: the verdict on a
        kernel must not outlive an edit (or a `git checkout`) of the reference that gave it."""
        return f"{self.key}@{file_digest(self.reference_path)}"


def file_digest(path: str) -> str:
    """A short content digest of a file ("missing" when it cannot be read)."""
    try:
        with open(path, "rb") as handle:
            return hashlib.sha256(handle.read()).hexdigest()[:16]
    except OSError:
        return "missing"


ProfileKey = tuple[str, str, str | None, str, str, bool]


def profile_key(kernel_source: str, task: TaskRef, hardware: str, backend: str, check: bool,
                check_variant: str | None, seeds: Sequence[int] | None = None,
                kernel_name: str | None = None) -> ProfileKey | None:
    """The one key a profile is cached under, by every profiler and every reader of the cache: the kernel's
    content (and which of its functions ran, when named), the task with its reference's content, how it was
    checked, the hardware and the backend. None for a run on seeds chosen by the caller: its verdict is not
    the one of fresh seeds, so it is not cached."""
    if seeds is not None:
        return None
    kernel = kernel_hash(kernel_source) + (f"#{kernel_name}" if kernel_name else "")
    return kernel, task.identity, check_variant, hardware, backend, check


@runtime_checkable
class Profiler(Protocol):
    """Checks and times kernels on one backend: what the search, the CLI, the language server and the
    service ask of the simulator, a Trainium host, the profiling service's client or a cache in front of one.

    `profile` never raises for a kernel's faults (they come back as `ProfileResult.error`), nor for a check that
    needs more than the backend's own limits (`ProfileResult.unchecked`, the kernel still timed). `seeds`: the
    check's seeds instead of fresh ones (the result is then not cached); `kernel_label`: the file name
    results and errors show (its folder's helpers are importable); `kernel_name`: the kernel function in
    the file; `cancel`: set, it stops a running evaluation. `at_timed_size`: this backend checking on one
    fresh seed at the size it times, or None when it already does."""

    backend: str

    def profile(self, kernel_source: str, task: TaskRef, hardware: str = "trn1", check: bool = True, *,
                seeds: Sequence[int] | None = None, kernel_label: str = "candidate.py",
                kernel_name: str | None = None, cancel: threading.Event | None = None) -> ProfileResult:
        ...

    def at_timed_size(self) -> Profiler | None:
        ...


def kernel_folder(kernel_label: str) -> str | None:
    """The folder of the kernel file when the label is the absolute path of one (the CLI and the editor
    name the user's file so; its sibling helpers are importable). Any other label is display text only: a
    bare name a client sends is never looked up in this process's working folder."""
    return os.path.dirname(kernel_label) if os.path.isabs(kernel_label) and os.path.isfile(kernel_label) else None


def kernel_hash(source: str) -> str:
    return hashlib.sha256(source.encode("utf-8")).hexdigest()


def zero_arrays(specs: Sequence[TensorSpec]) -> list[np.ndarray]:
    """Stand-ins of the right shapes that allocate nothing (for formulas that only read shapes)."""
    return [np.broadcast_to(np.zeros((), dtype=s.dtype), s.shape) for s in specs]


def task_work(task: Task, specs: Sequence[TensorSpec], case: Case | None, checked: bool = False) -> PeakWork | None:
    """The work "% of peak" divides by, at the timed size: the reference's declared peak_work, else its own
    NumPy work, counted on `case` (a case of the timed size already drawn; None: one is drawn): on its data
    when it is `checked` (the check runs its reference anyway), else on its shapes alone."""
    if task.peak_work is not None:
        return task.peak_work(zero_arrays(specs))
    return task.counted_work(case, shapes_only=not checked)


def counted_work(task: Task, specs: Sequence[TensorSpec], cases: Sequence[Future[Case]], drawn: Case | None
                 ) -> PeakWork | None:
    """`task_work` on a checked case of the timed size when there is one (the check runs its reference anyway,
    so counting on its data costs no extra run), else on the case the timed shapes were just drawn from."""
    timed = [tuple(s.shape) for s in specs]
    ready = (f.result() for f in cases if f.done())
    checked = next((c for c in ready if [np.shape(a) for a in c.inputs] == timed), None)
    return task_work(task, specs, checked or drawn, checked=checked is not None)


def ready(case: Case) -> Future[Case]:
    """A case drawn already, as the future the check takes its cases from."""
    future: Future[Case] = Future()
    future.set_result(case)
    return future


# One evaluation concludes (replays, references, comparison) at a time per process: the replays are Python
# (the GIL runs one at a time anyway), and a full-size check holds gigabytes (replayed block tensors,
# reference outputs, the comparison's temporaries): the search's two workers concluding at once exceeded
# 22 GB on the calibration bmm_softmax. The kernels' children still record side by side.
_one_conclusion_at_a_time = threading.Lock()


@contextmanager
def reference_thread() -> Iterator[ThreadPoolExecutor]:
    """A thread for the trusted side's own NumPy work of one evaluation (the reference's counted work and
    each case's expected outputs), done while the kernel's child records and while its replays run, so an
    evaluation waits for the slower of the two rather than their sum. On the way out, work not started
    is dropped and work under way is not waited for (a failed kernel does not wait for its reference)."""
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="accelopt-reference")
    try:
        yield pool
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


def fill_peak(result: ProfileResult, work: PeakWork | None, hardware: str) -> None:
    """% of peak, the side that bounds the task at peak, and the work both came from."""
    if work is None or not result.latency_ms:
        return
    hw = load_hardware(hardware)
    percent = peak_percent(result.latency_ms / 1000.0, work.mm_flops, work.vec_flops, work.hbm_bytes, hw, work.mm_dtype)
    times = peak_times(work.mm_flops, work.vec_flops, work.hbm_bytes, hw, work.mm_dtype)
    if percent > 100.0:  # the latency is below what the task's work needs at peak rates: never shown as more
        result.profile.setdefault("notes", []).append(
            f"% of peak capped at 100: the {result.latency_ms:.4g} ms latency is below the "
            f"{1000.0 * max(times.values()):.4g} ms the task's {'counted' if work.counted else 'declared'} work needs "
            "at the hardware's peak rates, so the kernel executes less work than the task counts (its reference "
            "does more than the result needs) or these numbers are wrong")
        percent = 100.0
    result.peak_percent = percent
    result.bound = max(times, key=lambda k: times[k])
    result.peak_work = asdict(work)


# How many bytes of a check's inputs the trusted side replays and judges per second, per seed, at the least:
# the default check budget of a large task grows with its inputs at this rate (benchmarks/check_speed.py)
CHECK_BYTES_PER_SECOND = 1 << 20


@dataclass(frozen=True)
class CheckBudget:
    """What the trusted side's replays of one evaluation may use: the check's limit of ours, not the kernel's."""

    seconds: float
    memory_bytes: int

    @staticmethod
    def of(limits: SandboxLimits, specs: Sequence[TensorSpec] | None, seeds: int) -> CheckBudget:
        """The limits' own check budget where they set one; else the kernel's time limit, or more for a task
        whose `seeds` replays of `specs`-sized inputs need more (a full-size check grows with its data) up to
        `limits.longest_check()`, and the kernel's memory limit. A timing alone (`specs` None: nothing is
        checked) has the kernel's time limit."""
        seconds = limits.check_seconds
        if seconds is None and specs is None:
            seconds = limits.seconds
        if seconds is None:
            inputs = sum(math.prod(s.shape) * s.dtype.itemsize for s in specs)
            seconds = min(limits.longest_check(), max(limits.seconds, max(seeds, 1) * inputs / CHECK_BYTES_PER_SECOND))
        memory_mb = limits.check_memory_mb if limits.check_memory_mb is not None else limits.memory_mb
        return CheckBudget(seconds, memory_mb * 2**20)


def input_shapes(timed: Sequence[TensorSpec], checked: Sequence[TensorSpec] | None) -> dict[str, list[list[int]]]:
    """The sizes a kernel ran with, for rewrite rules that must know the dimensions they tile."""
    shapes = {"timed": [list(s.shape) for s in timed]}
    if checked is not None:
        shapes["checked"] = [list(s.shape) for s in checked]
    return shapes


def seed_compared(result: ProfileResult, seed: int, rel: float, abs_err: float, problem: str | None) -> bool:
    """Fold one seed's comparison into the check; False once it fails (its message names the seed)."""
    result.rel_l2_error = max(result.rel_l2_error or 0.0, rel)
    result.max_abs_error = max(result.max_abs_error or 0.0, abs_err)
    if problem:
        result.correct, result.check_message = False, f"seed {seed}: {problem}"
        return False
    return True


def specs_of(case: Future[Case]) -> list[TensorSpec]:
    return [TensorSpec.of(a) for a in case.result().inputs]


class CheckingProfiler:
    """What every backend does around running a kernel: the cache key, the task's timing shapes
    (drawn once per task), the check's cases on seeds the kernel cannot predict, and judging the
    outputs against the reference."""

    backend = ""

    def __init__(self, seeds: int = 5, check_variant: str | None = None, limits: SandboxLimits | None = None,
                 forbidden_paths: Sequence[str] = (), cache: Any = None, rtol: float | None = None):
        self.seed_count = seeds
        self.check_variant = check_variant
        self.limits = limits or SandboxLimits()
        self.forbidden_paths = list(forbidden_paths)
        self.cache = cache if cache is not None else {}
        self.rtol = rtol
        self._specs: dict[str, list[TensorSpec]] = {}

    def at_timed_size(self) -> Self | None:
        """This profiler checking on one fresh seed at the size it times, so that the run timed is a run
        checked (a kernel that branches on the size gains nothing); None when it already does. Shares
        the cache and the timing shapes."""
        if not self.check_variant:
            return None
        timed = copy.copy(self)
        timed.check_variant, timed.seed_count = None, 1
        return timed

    def _lookup(self, kernel_source: str, task: TaskRef, hardware: str, check: bool, seeds: Sequence[int] | None,
                kernel_name: str | None) -> tuple[ProfileKey | None, ProfileResult | None]:
        """The cache key of this evaluation (None: not cacheable) and the result cached under it, if any."""
        key = profile_key(kernel_source, task, hardware, self.backend, check, self.check_variant, seeds, kernel_name)
        return key, self.cache.get(key) if key is not None else None

    def _new_result(self, kernel_source: str, kernel_label: str, timing_task: Task, hardware: str,
                    kernel_name: str | None) -> ProfileResult:
        """The result an evaluation fills in: which kernel, task, hardware and NKI it is about."""
        return ProfileResult(kernel_label, timing_task.name, hardware, self.backend, function=kernel_name,
                             nki_api=detect_version(kernel_source).describe())

    def _failed(self, result: ProfileResult, error: str, line: int | None, cache_key: Any) -> ProfileResult:
        """An evaluation that ends in an error; a kernel's own error (it has a line) is deterministic, so it
        is cached (a limit or a malformed result is not)."""
        result.error, result.error_line = error, line
        if line is not None and cache_key is not None:
            self.cache[cache_key] = result
        return result

    def _timing_specs(self, task: Task, ref: TaskRef) -> tuple[list[TensorSpec], Case | None]:
        """The timed size's input shapes, drawn once per task and version of its reference, and the case
        they were drawn from when that happened now (None when they were known)."""
        if ref.identity in self._specs:
            return self._specs[ref.identity], None
        drawn = task.shape_case()
        self._specs[ref.identity] = [TensorSpec.of(a) for a in drawn.inputs]
        return self._specs[ref.identity], drawn

    def _check_cases(self, result: ProfileResult, task: TaskRef, timing_task: Task, check: bool,
                     seeds: Sequence[int] | None) -> tuple[Task, list[Future[Case]]]:
        """The task the check runs (the check variant, else the timed one) and its cases, one per seed
        (recorded in `result`), drawn now; no cases when not checking."""
        if not check:
            return timing_task, []
        check_task = task.load(self.check_variant) if self.check_variant else timing_task
        result.seeds = list(seeds) if seeds is not None else fresh_seeds(self.seed_count)
        return check_task, [ready(check_task.make_case(seed)) for seed in result.seeds]

    def _forbidden(self, timing_task: Task) -> list[str]:
        """Paths the kernel may not read: the configured ones and the task's reference, with the
        compiled copies Python may have cached of it (the kernel's folder is importable)."""
        reference = timing_task.source_path
        cached = [importlib.util.cache_from_source(reference, optimization=level) for level in ("", 1, 2)
                  ] if reference and reference.endswith(".py") else []
        return self.forbidden_paths + ([reference] if reference else []) + cached

    @staticmethod
    def _judge(result: ProfileResult, cases: list[Future[Case]], outputs: Iterable[Sequence[Any]], rtol: float,
               references: ThreadPoolExecutor) -> None:
        """Compare case by case, letting each case's reference and outputs go before the next (outputs
        come one case at a time: replayed here, or memory-mapped from the files a device child left).
        Each case's reference is computed in `references` while its outputs are being produced."""
        produced_by_case = iter(outputs)
        result.correct, result.rel_l2_error, result.max_abs_error = True, 0.0, 0.0
        for index, seed in enumerate(result.seeds):
            expected = references.submit(lambda drawn=cases[index]: drawn.result().reference())
            produced = next(produced_by_case, None)
            if produced is None:
                result.correct, result.error = None, f"{MALFORMED}: {index} sets of outputs for {len(cases)} cases"
                return
            case = cases[index].result()
            cases[index] = None  # type: ignore[call-overload]
            if not seed_compared(result, seed, *compare(case.convert(list(produced)), expected.result(), rtol)):
                return


class SimulatorProfiler(CheckingProfiler):
    """Profiles on the CPU simulator and the Trainium performance model.

    `check_variant` checks correctness on a size variant of the task (e.g. "small", as the search
    does: seconds instead of minutes) while timing stays at the task's own size; guards against
    skipped work use the timed size.
    """

    backend = "simulator"

    def profile(self, kernel_source: str, task: TaskRef, hardware: str = "trn1", check: bool = True,
                seeds: Sequence[int] | None = None, kernel_label: str = "candidate.py",
                kernel_name: str | None = None, cancel: threading.Event | None = None) -> ProfileResult:
        cache_key, cached = self._lookup(kernel_source, task, hardware, check, seeds, kernel_name)
        if cached is not None:
            return cached
        timing_task = task.load()
        specs, drawn = self._timing_specs(timing_task, task)
        result = self._new_result(kernel_source, kernel_label, timing_task, hardware, kernel_name)
        with reference_thread() as references, ExitStack() as paused:
            workers = 0
            if check and self.check_variant is None and all(s.shape for s in specs):
                # checked at the timed size: every seed's inputs have the timed shapes (the replays hold each
                # case to that), so the cases are drawn beside the child's recording, not before it, or by
                # the workers that check them side by side (seeds.py) where they are large
                check_task = timing_task
                result.seeds = list(seeds) if seeds is not None else fresh_seeds(self.seed_count)
                workers = worker_count(specs, len(result.seeds))
                cases = [] if workers else [references.submit(timing_task.make_case, result.seeds[0])]
                case_specs = [specs] * len(result.seeds)
            else:
                check_task, cases = self._check_cases(result, task, timing_task, check, seeds)
                case_specs = [specs_of(case) for case in cases]
            result.input_shapes = input_shapes(specs, case_specs[0] if case_specs else None)
            plan = plan_runs(case_specs, check_task.launch, specs, timing_task.launch)
            budget = CheckBudget.of(self.limits, case_specs[0] if case_specs else None, len(result.seeds))
            job = SandboxJob(kernel_source, list(plan.runs), hardware, self._forbidden(timing_task), kernel_name,
                             kernel_label, kernel_folder(kernel_label))
            workdir = sandbox_workdir()
            # while the child records: the first case, the reference's work counted on it, the other cases
            work = references.submit(counted_work, timing_task, specs, cases, drawn)
            if not workers:
                cases += [references.submit(timing_task.make_case, seed) for seed in result.seeds[len(cases):]]
            # a trace-only timed replay follows the child's tape as it is written, so it ends with the recording
            follow = plan.timing_run not in plan.case_runs or workers > 0
            # the tapes, parsed, count against the kernel's memory limit; the replays then have the rest of the check's
            parsed = ParseBudget(self.limits.memory_mb * 2**20)
            # one time limit for the kernel's stages: its recording, the hand-back, the parse, the replays and
            # the model (the reference's own work does not count: Replays), the check's budget of ours
            deadline = time.monotonic() + budget.seconds
            try:
                with ThreadPoolExecutor(max_workers=1, thread_name_prefix="accelopt-sandbox") as sandbox:
                    recorded = sandbox.submit(run_sandboxed, job, workdir, self.limits, cancel)
                    followed = (self._follow(workdir, plan, recorded, result.hardware, kernel_label, parsed,
                                             deadline) if follow else None)
                    recording = recorded.result()
                if recording.error:
                    return self._failed(result, recording.error, recording.error_line, cache_key)
                check_tape_names(recording.traces, len(plan.runs))
                # the collector stays paused from the tapes' parsing to the end of their replays: each
                # collection would rescan their millions of parsed lists (seconds per full-size tape)
                paused.enter_context(collector_paused())
                chunks = [followed[1] if isinstance(followed, tuple) and run == plan.timing_run
                          else read_tape(workdir, name, parsed, deadline) for run, name in enumerate(recording.traces)]
            except MalformedResultError as exc:
                return self._failed(result, f"{MALFORMED}: {exc}", None, None)
            except ReplayLimitError as exc:  # the hand-back needs more than our limits: nothing to show
                return self._unchecked(result, exc, "timing", budget)
            finally:
                shutil.rmtree(workdir, ignore_errors=True)
            checking = Checking(task, cases, check_task.rtol if self.rtol is None else self.rtol, workers,
                                cancel) if check else None
            with _one_conclusion_at_a_time:
                return self._conclude(result, chunks, followed, plan, checking, cache_key, kernel_label, references,
                                      work, budget, max(0, budget.memory_bytes - parsed.spent),
                                      max(0.0, deadline - time.monotonic()))

    def _follow(self, workdir: str, plan: RunPlan, recorded: Future[Any], hardware: str, kernel_label: str,
                budget: ParseBudget, deadline: float) -> tuple[RunResult, list[Any]] | Exception:
        """The timed run's trace-only replay, made while the child records it, with its tape's chunks; or
        what stopped it (judged once the child's own result is known: its error, if any, comes first)."""
        try:
            return replay_while_recorded(workdir, plan.timing_run, plan.runs[plan.timing_run].specs, recorded,
                                         hardware, kernel_label, deadline - time.monotonic(), budget)
        except (NkiError, TapeError, ReplayLimitError, MalformedResultError) as exc:
            return exc

    def _conclude(self, result: ProfileResult, chunks: list[list[Any]],
                  followed: tuple[RunResult, list[Any]] | Exception | None, plan: RunPlan, check: Checking | None,
                  cache_key: Any, kernel_label: str, references: ThreadPoolExecutor,
                  counted: Future[PeakWork | None], budget: CheckBudget, memory_bytes: int, seconds: float
                  ) -> ProfileResult:
        """Replay the traces (the timed one may be replayed already, `followed`) within `memory_bytes` and
        what is left of the time limit, `seconds`: judge the check's outputs, apply the guards to the timed
        replay and time it. A check that runs out of the trusted side's own limits (`budget`) leaves the kernel
        unchecked, still timed (by a trace-only replay of its own budget where the timed run was to be a checked
        one)."""
        workers = None
        limit: ReplayLimitError | None = None
        try:
            if isinstance(followed, Exception):
                raise followed
            tapes = [assemble(tape) for tape in chunks]
            replays = Replays(tapes, plan, result.hardware, kernel_label, seconds, memory_bytes,
                              followed[0] if followed else None)
            if check is not None and check.workers:
                job = SeedJob(check.task, plan.runs[plan.case_runs[0]].specs, check.rtol, result.hardware,
                              kernel_label, budget.memory_bytes)
                workers = SeedWorkers(check.workers, job, tapes[plan.case_runs[0]], result.seeds, seconds)
            tapes.clear()  # the replays hold what they need: the rest goes before the collector resumes
            if check is not None and workers is None:
                try:
                    self._judge(result, check.cases, replays.outputs(check.cases), check.rtol, references)
                except ReplayLimitError as exc:
                    limit = exc
                if result.error:
                    return result
            timed = replays.timed(renewed=budget.seconds if limit is not None else None)
            if workers is not None:
                workers.begin(replays.liveness_of(plan.timing_run, timed))
            report = timing_report(timed, result.hardware, replays.seconds_left)  # while the workers check
            if workers is not None:
                try:
                    error = _judge_verdicts(result, workers.verdicts(check.cancel if check else None), workers.died)
                except ReplayLimitError as exc:
                    error, limit = None, exc
                if error is not None:
                    result.correct = None
                    return self._failed(result, error[0], error[1], cache_key)  # cached only with a kernel line
        except NkiError as exc:  # what the kernel's own numeric run would have raised (the same line)
            result.correct = None
            return self._failed(result, str(exc), exc.line, cache_key)
        except TapeError as exc:
            result.correct = None
            return self._failed(result, f"{MALFORMED}: its trace {exc}", None, None)
        except MalformedResultError as exc:
            result.correct = None
            return self._failed(result, f"{MALFORMED}: {exc}", None, None)
        except ReplayLimitError as exc:  # the timing itself needs more than our limits: nothing to show
            return self._unchecked(result, exc, "timing", budget)
        except ShapeDriftError as exc:
            result.correct = None
            return self._failed(result, str(exc), None, None)
        finally:
            if workers is not None:
                workers.close()
        work = counted.result()
        violation = guard_violation(trace_facts(timed), work)
        _fill_timing(result, report, work, result.hardware)
        if violation:
            result.correct = False
            result.check_message = violation
        elif limit is not None:
            return self._unchecked(result, limit, "check", budget)  # a limit of ours: not cached
        if cache_key is not None:
            self.cache[cache_key] = result
        return result

    @staticmethod
    def _unchecked(result: ProfileResult, limit: ReplayLimitError, stage: str, budget: CheckBudget) -> ProfileResult:
        """The kernel left unchecked because the trusted side's `stage` ("check" or "timing") needed more than
        this profiler's limit: not the kernel's fault, so no error and no verdict, and not cached (a higher
        limit may check it)."""
        result.correct, result.rel_l2_error, result.max_abs_error = None, None, None
        result.check_message = None
        memory = limit.resource == "memory"
        seconds = f"{budget.seconds:.0f}" if budget.seconds >= 10 else f"{budget.seconds:.2g}"
        gigabytes = budget.memory_bytes / 2**30
        amount = (f"{gigabytes:.3g} GB" if gigabytes >= 1 else f"{budget.memory_bytes / 2**20:.0f} MB") if memory \
            else f"{seconds} s"
        result.unchecked = f"the {stage} needs more than {amount} here"
        result.unchecked_limit = "memory" if memory else "seconds"
        return result


@dataclass
class Checking:
    """How an evaluation's check runs: its cases (drawn, or being drawn, in the reference thread; none when
    `workers` processes draw and check them) and its tolerance."""

    task: TaskRef
    cases: list[Future[Case]]
    rtol: float
    workers: int
    cancel: threading.Event | None


def _judge_verdicts(result: ProfileResult, verdicts: list[SeedVerdict], died: str | None
                    ) -> tuple[str, int | None] | None:
    """Fill the check from the workers' verdicts, in seed order; an error (and its kernel line, for the
    kernel's own) where a seed could not be checked; TaskError where the reference failed; `ReplayLimitError`
    where a seed ran out of our limits."""
    result.correct, result.rel_l2_error, result.max_abs_error = True, 0.0, 0.0
    for verdict in verdicts:
        seed = result.seeds[verdict.index]
        if verdict.kind == "checked":
            if not seed_compared(result, seed, verdict.rel_l2_error, verdict.max_abs_error, verdict.problem):
                return None
            continue
        if verdict.kind == "kernel":
            return verdict.problem or "", verdict.line
        if verdict.kind == "reference":  # the reference's own code failed: bad input, as in the profiler's process
            raise TaskError(f"{verdict.problem} (seed {seed})")
        if verdict.kind == "limit":  # the worker's replay ran out of our limits, as the profiler's own would
            raise ReplayLimitError(verdict.problem or "", verdict.resource or "seconds")
        prefix = {"tape": f"{MALFORMED}: its trace ", "drift": f"seed {seed}: "}
        return prefix.get(verdict.kind, "") + (verdict.problem or ""), None
    if died is not None or len(verdicts) < len(result.seeds):
        return died or f"the check's workers answered for {len(verdicts)} of {len(result.seeds)} seeds", None
    return None


def _fill_timing(result: ProfileResult, report: dict[str, Any], work: PeakWork | None, hardware: str) -> None:
    data = dict(report)
    result.latency_ms = data.pop("latency_ms", None)
    result.bottleneck = data.pop("bottleneck", None)
    result.lines = data.pop("lines", [])
    result.profile = data
    fill_peak(result, work, hardware)
