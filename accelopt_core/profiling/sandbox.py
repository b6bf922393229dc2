"""Running untrusted kernel code (anything a model wrote) in a child process.

Each evaluation gets a fresh Python process (no state leaks between candidates, and nothing it
does can reach the caller's process) with:
- the operating system's confinement (confine.py: bubblewrap namespaces, a read-only view of only what
  Python needs, a seccomp filter against new processes), unless the caller or the user allowed running
  without it where bubblewrap cannot run;
- a wall-clock limit (the parent kills the whole sandbox) and rlimits for address space, CPU time,
  file size and processes; a bounded job folder on disk, the only place it may write;
- an environment built from an allow-list (no API keys, tokens or passwords);
- stderr read into a bounded tail (a flood costs the parent no memory);
- an audit hook, a second layer, that refuses writes outside its directory, reads of the task's
  reference files and of the optimization memory, subprocesses, sockets, SQLite and ctypes.
A candidate that hangs, exhausts memory, exits early or crashes costs one failed evaluation.
"""

from __future__ import annotations

import gc
import json
import math
import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ..nki.loader import visible_folder
from .confine import (
    INSTALL_HINT,
    SOURCE_ROOT,
    Confinement,
    IsolationUnavailableError,
    isolation_problem,
    sandbox_environment,
    signal_name,
    spawn_confined,
    unconfined_allowed,
    warn_unconfined,
)
from .handback import MalformedResultError, read_result, write_result
from .measure import Recording, Run
from .result import CANCELLED

_BLOCKED_EVENTS = ("subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork",
                   "os.forkpty", "socket.connect", "socket.bind", "sqlite3.connect", "ctypes.dlopen",
                   "ctypes.dlsym", "os.kill", "os.killpg", "os.remove", "os.unlink", "os.rename", "os.rmdir",
                   "os.chmod", "os.chown", "shutil.rmtree", "os.symlink", "os.link", "os.truncate")


CHECK_GROWTH = 4  # a default check budget grows with its task's inputs up to this many times the kernel's limit


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits for one evaluation. `memory_mb` 0 means no address-space limit (the Neuron runtime
    maps device memory). `allow_unconfined` lets this launch run without the OS sandbox where bubblewrap
    cannot run (a user's own file in `accelopt profile`, with a warning); kernels from a model or a
    client never get it."""

    seconds: float = 300.0
    memory_mb: int = 8192
    # what the job folder may hold: a simulated kernel's traces (at most handback.MAX_TRACE_BYTES each), or
    # the Neuron backend's outputs of every checked case (a five-seed check of the largest NKIBench task at
    # full size, bmm, writes 5 x 1 GiB)
    disk_mb: int = 16384
    allow_unconfined: bool = False
    # the trusted side's own budget for one evaluation's replays (its check and its timing), which running out
    # of leaves a kernel unchecked, never failed: None, the seconds grow with the task's inputs from `seconds`
    # up to CHECK_GROWTH times it (profiler.CheckBudget) and the memory is `memory_mb`'s
    check_seconds: float | None = None
    check_memory_mb: int | None = None

    def longest_check(self) -> float:
        """The most seconds the check of any task may be given: what a watchdog over a whole evaluation allows."""
        return self.check_seconds if self.check_seconds is not None else CHECK_GROWTH * self.seconds

    def longest_evaluation(self) -> float:
        """A watchdog's bound on one whole evaluation: the kernel's run, its check, and as long again as the
        run plus two minutes for the rest (drawing inputs, the references, the comparison)."""
        return 2 * self.seconds + self.longest_check() + 120


@dataclass
class SandboxJob:
    """Everything a worker needs, nothing more: the kernel source and the runs to record (the inputs'
    shapes and launches, never their data)."""

    kernel_source: str
    runs: list[Run]
    hardware: str
    forbidden_paths: list[str] = field(default_factory=list)
    kernel_name: str | None = None
    kernel_filename: str = "candidate.py"  # how errors name the kernel file
    kernel_folder: str | None = None  # where the kernel file lives: its sibling modules are importable


def open_guard(writable: Sequence[str], forbidden: Sequence[str]) -> Callable[[tuple[Any, ...]], None]:
    """The check of an audit "open" event: writes only below `writable`, nothing at all below
    `forbidden` (the reference, the memory database). Shared by every sandboxed child."""
    writable_real = [os.path.realpath(p) for p in writable]
    forbidden_real = [os.path.realpath(p) for p in forbidden]

    def inside(path: str, root: str) -> bool:
        return path == root or path.startswith(root.rstrip(os.sep) + os.sep)

    def check(args: tuple[Any, ...]) -> None:
        path, mode, flags = args[0], args[1], args[2]
        if not isinstance(path, (str, bytes)):
            return
        real = os.path.realpath(os.fsdecode(path))
        writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
            isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND))
        if writing and not any(inside(real, root) for root in writable_real):
            raise PermissionError(f"sandbox: writing {real} is not allowed")
        if any(inside(real, root) for root in forbidden_real):
            raise PermissionError(f"sandbox: reading {real} is not allowed")

    return check


def _install_guard(workdir: str, forbidden: Sequence[str]) -> None:
    """Refuse the child's dangerous operations from now on (an audit hook cannot be removed)."""
    check_open = open_guard([workdir], forbidden)

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if event == "open":
            check_open(args)
        elif event.startswith(_BLOCKED_EVENTS):
            raise PermissionError(f"sandbox: {event} is not allowed")

    sys.addaudithook(hook)


def _die_with_parent() -> None:
    """On Linux, ask the kernel to kill this worker when its parent dies (a killed language server or
    service worker must not leave candidates running)."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    parent = os.getppid()
    pr_set_pdeathsig = 1
    ctypes.CDLL(None).prctl(pr_set_pdeathsig, signal.SIGKILL)
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(1)


def worker_arguments() -> tuple[str, SandboxLimits, bool]:
    """WORKDIR, the limits and whether the OS confines this process, from a worker's command line
    (`python -m MODULE WORKDIR LIMITS_JSON`, see run_worker)."""
    workdir, settings = sys.argv[1], json.loads(sys.argv[2])
    limits = SandboxLimits(seconds=float(settings["seconds"]), memory_mb=int(settings["memory_mb"]),
                           disk_mb=int(settings["disk_mb"]))
    return workdir, limits, bool(settings["confined"])


def apply_limits(limits: SandboxLimits, processes: int | None) -> None:
    """The worker's rlimits, soft and hard (the kernel cannot raise them again), set before any kernel
    code runs: address space, file size (no file beyond what fits in memory or the job folder), CPU time
    (a second past the wall-clock limit, then SIGKILL), no core files, and at most `processes` processes
    and threads (None: unchanged; RLIMIT_NPROC counts all of a user's processes outside a user namespace)."""
    import resource

    def cap(kind: int, value: int, hard: int | None = None) -> None:
        _, current = resource.getrlimit(kind)
        top = value if hard is None else hard
        if current != resource.RLIM_INFINITY:
            value, top = min(value, current), min(top, current)
        resource.setrlimit(kind, (value, top))

    mib = 1024 * 1024
    if limits.memory_mb > 0:
        cap(resource.RLIMIT_AS, limits.memory_mb * mib)
    cap(resource.RLIMIT_FSIZE, min(limits.memory_mb or limits.disk_mb, limits.disk_mb) * mib)
    cpu = math.ceil(limits.seconds) + 1
    cap(resource.RLIMIT_CPU, cpu, cpu + 1)
    cap(resource.RLIMIT_CORE, 0)
    if processes is not None:
        cap(resource.RLIMIT_NPROC, processes)


WORKER_THREADS = 16  # a simulated kernel's worker: Python's own threads and a kernel's, no processes


def worker_main() -> None:
    """Body of `python -m accelopt_core.profiling.sandbox WORKDIR LIMITS_JSON`: read the job, apply the
    limits and the guard, record the runs, and leave the result in WORKDIR as plain data (handback.py)."""
    from ..blas import single_threaded_blas
    from ..nki import load_module
    from ..nki.loader import KernelLoadError, find_kernel
    from .measure import record

    workdir, limits, confined = worker_arguments()
    _die_with_parent()
    # a short-lived process recording one trace: each collection would rescan the millions of small objects
    # the trace and its tape are made of (seconds on a full-size kernel), and its memory is bounded anyway
    gc.disable()
    single_threaded_blas()
    apply_limits(limits, WORKER_THREADS if confined else None)
    os.chdir(workdir)
    with open(os.path.join(workdir, "job.pkl"), "rb") as handle:
        job: SandboxJob = pickle.load(handle)
    os.remove(os.path.join(workdir, "job.pkl"))
    _install_guard(workdir, job.forbidden_paths)
    try:
        kernel = find_kernel(load_module(job.kernel_source, job.kernel_filename, folder=job.kernel_folder),
                             job.kernel_name)
        result = record(kernel, job.runs, job.hardware, workdir)
    except KernelLoadError as exc:
        result = Recording(error=str(exc))
    except MemoryError:
        result = Recording(error="the kernel ran out of memory (sandbox limit)")
    except Exception as exc:  # import-time failure of the candidate module
        result = Recording(error=f"loading the kernel failed: {type(exc).__name__}: {exc}")
    write_result(workdir, result.plain())


MALFORMED = "the kernel's worker process left a malformed result"
T = TypeVar("T")


@dataclass
class WorkerRun:
    """How a worker child ended: its result as checked plain data (handback.read_result), or why there
    is none."""

    result: dict[str, Any] | None = None
    error: str | None = None


def importable_environment(env: dict[str, str]) -> dict[str, str]:
    """`env` with this checkout first on PYTHONPATH: a child process must run the same code as its
    parent, installed or not."""
    paths = [SOURCE_ROOT, *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])]
    return {**env, "PYTHONPATH": os.pathsep.join(paths)}


class StreamTail:
    """The last bytes a child writes to a pipe, read on a thread as they come: a child that floods its
    stderr costs the parent a few kilobytes, and the pipe never fills up and stalls it."""

    def __init__(self, stream: Any, keep: int = 64 * 1024):
        self.keep = keep
        self.data = bytearray()
        self._stream = stream
        self._thread = threading.Thread(target=self._read, daemon=True, name="sandbox-stderr")
        self._thread.start()

    def _read(self) -> None:
        try:
            while chunk := self._stream.read1(1 << 16):
                self.data += chunk
                if len(self.data) > 2 * self.keep:
                    del self.data[:-self.keep]
        except (OSError, ValueError):  # the pipe was closed under us: a writer outlived the wait
            return

    def last_line(self, wait: float = 1.0) -> str | None:
        """The last line written, once the writers have gone (or after `wait` seconds)."""
        self._thread.join(wait)
        lines = bytes(self.data[-self.keep:]).decode("utf-8", "replace").strip().splitlines()
        return lines[-1] if lines else None


MAX_JOB_FILES = 10000


def folder_bytes(folder: str, limit: int) -> int | None:
    """Bytes stored below `folder` (allocated blocks, so sparse files count what they use), or None once
    there are more than `limit` entries."""
    total, seen, pending = 0, 0, [folder]
    while pending:
        try:
            entries = list(os.scandir(pending.pop()))
        except OSError:
            continue
        for entry in entries:
            seen += 1
            if seen > limit:
                return None
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            total += info.st_blocks * 512
            if entry.is_dir(follow_symlinks=False):
                pending.append(entry.path)
    return total


def _over_budget(workdir: str, limits: SandboxLimits) -> str | None:
    used = folder_bytes(workdir, MAX_JOB_FILES)
    if used is None:
        return f"the kernel created more than {MAX_JOB_FILES} files in its job folder (sandbox limit)"
    if used > limits.disk_mb * 1024 * 1024:
        return f"the kernel wrote more than {limits.disk_mb} MB into its job folder (sandbox limit)"
    return None


def launch(module: str, workdir: str, env: dict[str, str], limits: SandboxLimits,
           confinement: Confinement) -> tuple[subprocess.Popen[bytes], bool]:
    """Start `python -m MODULE WORKDIR LIMITS` confined by the OS, or unconfined where bubblewrap cannot run
    and that is allowed (with a warning); IsolationUnavailableError otherwise. Says whether it is confined."""
    problem = isolation_problem()
    if problem is not None and not (limits.allow_unconfined or unconfined_allowed()):
        raise IsolationUnavailableError(f"kernels cannot be isolated here: {problem}; {INSTALL_HINT}")
    settings = {"seconds": limits.seconds, "memory_mb": limits.memory_mb, "disk_mb": limits.disk_mb,
                "confined": problem is None}
    # runpy warns that the package already imported the module it runs; harmless, and it would pose as the
    # reason of every failure (the last line of stderr)
    command = [sys.executable, "-W", "ignore::RuntimeWarning:runpy", "-m", module, workdir, json.dumps(settings)]
    streams: dict[str, Any] = {"cwd": workdir, "stdin": subprocess.DEVNULL, "stdout": subprocess.DEVNULL,
                               "stderr": subprocess.PIPE}
    if problem is None:
        return spawn_confined(confinement, command, importable_environment(env), **streams), True
    warn_unconfined(problem)
    return subprocess.Popen(command, env=importable_environment(env), start_new_session=True, **streams), False


def run_worker(module: str, job: Any, workdir: str, env: dict[str, str], limits: SandboxLimits,
               confinement: Confinement, cancel: threading.Event | None = None) -> WorkerRun:
    """Run `python -m MODULE WORKDIR LIMITS` on `job` (pickled into WORKDIR) inside `confinement`; the whole
    sandbox is killed on timeout, cancellation or a job folder over its budget; its result is the plain
    data it left in WORKDIR, checked here (nothing the child wrote is unpickled or executed)."""
    with open(os.path.join(workdir, "job.pkl"), "wb") as handle:
        pickle.dump(job, handle, protocol=pickle.HIGHEST_PROTOCOL)
    try:
        child, confined = launch(module, workdir, env, limits, confinement)
    except (IsolationUnavailableError, OSError) as exc:
        return WorkerRun(error=str(exc))
    with child:
        stderr = StreamTail(child.stderr)
        stopped = _supervise(child, workdir, limits, cancel)
        if stopped is not None:
            os.killpg(child.pid, signal.SIGKILL)  # bwrap: its PID namespace, every process in it, dies too
            child.wait()
            stderr.last_line()  # let the reader finish before the pipe closes
            return WorkerRun(error=stopped)
        detail = stderr.last_line()
    if child.returncode == 0:
        try:
            return WorkerRun(result=read_result(workdir))
        except MalformedResultError as exc:
            return WorkerRun(error=f"{MALFORMED}: {exc}")
    return WorkerRun(error=_exit_reason(child.returncode, confined) + (f": {detail}" if detail else ""))


def _supervise(child: subprocess.Popen[bytes], workdir: str, limits: SandboxLimits,
               cancel: threading.Event | None) -> str | None:
    """Wait for the child; why it must be stopped (cancelled, out of time, job folder too large), or None
    once it exited by itself. Checks four times a second, and exactly at the deadline."""
    deadline = time.monotonic() + limits.seconds
    while True:
        try:
            child.wait(timeout=max(0.0, min(0.25, deadline - time.monotonic())))
            return None
        except subprocess.TimeoutExpired:
            if cancel is not None and cancel.is_set():
                return CANCELLED
            if time.monotonic() >= deadline:
                return f"the kernel did not finish within {limits.seconds:g} s (sandbox limit)"
            problem = _over_budget(workdir, limits)
            if problem is not None:
                return problem


WORKDIR_PREFIX = "accelopt-eval-"


def sandbox_workdir() -> str:
    """A fresh private folder for one evaluation, on disk in the system's temporary folder (not /dev/shm:
    what a kernel stores there would sit in memory outside its address-space limit). Its name carries this
    process's id, so that folders left by a process that was killed are removed by the next one."""
    remove_orphaned_workdirs(tempfile.gettempdir())
    return os.path.realpath(tempfile.mkdtemp(prefix=f"{WORKDIR_PREFIX}{os.getpid()}-"))


ORPHAN_AGE_SECONDS = 900.0  # untouched this long: no live evaluation (its child writes within its time limit)


def remove_orphaned_workdirs(folder: str) -> list[str]:
    """Remove the evaluation folders in `folder` whose process no longer exists (killed before it could
    clean up, e.g. a language server or a service worker stopped with SIGKILL) and that nothing touched
    for a while (a process of another PID namespace sharing the folder looks dead from here); the ones
    removed."""
    removed = []
    for entry in os.scandir(folder):
        owner = entry.name.removeprefix(WORKDIR_PREFIX).split("-", 1)[0]
        if not (entry.name.startswith(WORKDIR_PREFIX) and owner.isdigit()) or _process_exists(int(owner)):
            continue
        try:
            idle = time.time() - entry.stat(follow_symlinks=False).st_mtime
        except OSError:
            continue
        if idle > ORPHAN_AGE_SECONDS:
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(entry.path)
    return removed


def _process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def kernel_confinement(job: SandboxJob, workdir: str) -> Confinement:
    """What a simulated kernel sees besides the system and Python: its own folder or its package's, decided
    by the disk (never by its source), read-only, with the reference and other forbidden files covered;
    never a folder holding the temporary folder or the home directory (confine.private_folder)."""
    root = visible_folder(job.kernel_filename, job.kernel_folder)
    return Confinement(workdir=workdir, read_only=(root,) if root else (), hidden=tuple(job.forbidden_paths))


def run_sandboxed(job: SandboxJob, workdir: str, limits: SandboxLimits = SandboxLimits(),
                  cancel: threading.Event | None = None) -> Recording:
    """Record a kernel's runs in a fresh child process working in `workdir` (the caller removes it once
    it has read the traces left there); failures of any kind come back as an error. Setting `cancel`
    kills the child within a quarter of a second."""
    env = sandbox_environment(dict(os.environ), {"TMPDIR": workdir, "HOME": workdir})
    run = run_worker("accelopt_core.profiling.sandbox", job, workdir, env, limits, kernel_confinement(job, workdir),
                     cancel)
    return plain_result(run, Recording.from_plain, Recording)


def plain_result(run: WorkerRun, build: Callable[[dict[str, Any]], T], failed: Callable[..., T]) -> T:
    """`build(run.result)`, or `failed(error=...)` when the child left no result or a malformed one."""
    if run.result is None:
        return failed(error=run.error)
    try:
        return build(run.result)
    except (MalformedResultError, TypeError) as exc:
        return failed(error=f"{MALFORMED}: {exc}")


def _exit_reason(code: int | None, confined: bool) -> str:
    """Why the worker ended without a result. bwrap passes on a signal's death as status 128 + signal."""
    if code is None:
        return "the kernel's worker process did not report a result"
    if confined and 128 < code < 128 + signal.NSIG:
        code = 128 - code
    if code < 0:
        return f"the kernel's worker process was killed by signal {signal_name(-code)} (crash or memory limit)"
    return f"the kernel's worker process exited with status {code} before reporting a result"


def leave_at_once() -> None:
    """End a worker whose result is written without tearing the interpreter down: the teardown's last
    collection and frees walk everything the kernel's run made (over a second of wall time after a full-size
    recording, which the trusted side waits for before it times the kernel), and nothing of it is needed any
    more. The standard streams are flushed first (the parent reads the last line of stderr)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    worker_main()
    leave_at_once()
