"""Running untrusted kernel code (anything a model wrote) in a child process.

Each evaluation gets a fresh Python process (no state leaks between candidates, and nothing it
does can reach the caller's process) with:
- a wall-clock limit (the parent kills it) and an address-space limit (RLIMIT_AS);
- a fresh temporary working directory, the only place it may write;
- an environment with secrets (API keys, tokens) removed;
- an audit hook that refuses writes outside its directory, reads of the task's reference files and
  of the optimization memory, subprocesses, sockets, SQLite and ctypes.
A candidate that hangs, exhausts memory, exits early or crashes costs one failed evaluation.
"""

from __future__ import annotations

import os
import pickle
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from .handback import MalformedResultError, read_result, write_result
from .measure import Recording, Run

SECRET_PATTERN = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|CREDENTIAL|AUTH)", re.IGNORECASE)
_BLOCKED_EVENTS = ("subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork",
                   "os.forkpty", "socket.connect", "socket.bind", "sqlite3.connect", "ctypes.dlopen",
                   "ctypes.dlsym", "os.kill", "os.killpg", "os.remove", "os.unlink", "os.rename", "os.rmdir",
                   "os.chmod", "os.chown", "shutil.rmtree", "os.symlink", "os.link", "os.truncate")


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits for one evaluation."""

    seconds: float = 300.0
    memory_mb: int = 8192


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


def clean_environment(environ: dict[str, str]) -> dict[str, str]:
    """The environment without anything that looks like a credential."""
    return {k: v for k, v in environ.items() if not SECRET_PATTERN.search(k)}


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


def worker_main() -> None:
    """Body of `python -m accelopt_core.profiling.sandbox WORKDIR MEMORY_MB`: read the job, apply the
    limits and the guard, record the runs, and leave the result in WORKDIR as plain data (handback.py)."""
    import resource

    from ..blas import single_threaded_blas
    from ..nki import load_module
    from ..nki.loader import KernelLoadError, find_kernel
    from .measure import record

    workdir, memory_mb = sys.argv[1], int(sys.argv[2])
    _die_with_parent()
    single_threaded_blas()
    limit = memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
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


def _scratch_root() -> str | None:
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


CANCELLED = "evaluation cancelled"
MALFORMED = "the kernel's worker process left a malformed result"
T = TypeVar("T")


@dataclass
class WorkerRun:
    """How a worker child ended: its result as checked plain data (handback.read_result), or why there
    is none."""

    result: dict[str, Any] | None = None
    error: str | None = None


SOURCE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def importable_environment(env: dict[str, str]) -> dict[str, str]:
    """`env` with this checkout first on PYTHONPATH: a child process must run the same code as its
    parent, installed or not."""
    paths = [SOURCE_ROOT, *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])]
    return {**env, "PYTHONPATH": os.pathsep.join(paths)}


def run_worker(module: str, job: Any, workdir: str, env: dict[str, str], limits: SandboxLimits,
               cancel: threading.Event | None = None) -> WorkerRun:
    """Run `python -m MODULE WORKDIR MEMORY_MB` on `job` (pickled into WORKDIR) in its own session;
    killed on timeout or cancellation; its result is the plain data it left in WORKDIR, checked here
    (nothing the child wrote is unpickled or executed)."""
    with open(os.path.join(workdir, "job.pkl"), "wb") as handle:
        pickle.dump(job, handle, protocol=pickle.HIGHEST_PROTOCOL)
    # runpy warns that the package already imported the module it runs; harmless, and it would pose as the
    # reason of every failure (the last line of stderr)
    command = [sys.executable, "-W", "ignore::RuntimeWarning:runpy", "-m", module, workdir, str(limits.memory_mb)]
    with subprocess.Popen(command, cwd=workdir, env=importable_environment(env), stdin=subprocess.DEVNULL,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True) as child:
        deadline = time.monotonic() + limits.seconds
        while True:
            try:
                _, stderr = child.communicate(timeout=max(0.0, min(0.25, deadline - time.monotonic())))
                break
            except subprocess.TimeoutExpired:
                stopped = cancel is not None and cancel.is_set()
                if stopped or time.monotonic() >= deadline:
                    os.killpg(child.pid, signal.SIGKILL)
                    child.communicate()
                    return WorkerRun(error=CANCELLED if stopped else
                                     f"the kernel did not finish within {limits.seconds:g} s (sandbox limit)")
    if child.returncode == 0:
        try:
            return WorkerRun(result=read_result(workdir))
        except MalformedResultError as exc:
            return WorkerRun(error=f"{MALFORMED}: {exc}")
    detail = stderr.decode("utf-8", "replace").strip().splitlines()[-1:] if stderr else []
    return WorkerRun(error=_exit_reason(child.returncode) + (f": {detail[0]}" if detail else ""))


def sandbox_workdir() -> str:
    """A fresh private folder for one evaluation (in memory-backed /dev/shm when there is one)."""
    return tempfile.mkdtemp(prefix="accelopt-eval-", dir=_scratch_root())


def run_sandboxed(job: SandboxJob, workdir: str, limits: SandboxLimits = SandboxLimits(),
                  cancel: threading.Event | None = None) -> Recording:
    """Record a kernel's runs in a fresh child process working in `workdir` (the caller removes it once
    it has read the traces left there); failures of any kind come back as an error. Setting `cancel`
    kills the child within a quarter of a second."""
    run = run_worker("accelopt_core.profiling.sandbox", job, workdir, clean_environment(dict(os.environ)),
                     limits, cancel)
    return plain_result(run, Recording.from_plain, Recording)


def plain_result(run: WorkerRun, build: Callable[[dict[str, Any]], T], failed: Callable[..., T]) -> T:
    """`build(run.result)`, or `failed(error=...)` when the child left no result or a malformed one."""
    if run.result is None:
        return failed(error=run.error)
    try:
        return build(run.result)
    except (MalformedResultError, TypeError) as exc:
        return failed(error=f"{MALFORMED}: {exc}")


def _exit_reason(code: int | None) -> str:
    if code is None:
        return "the kernel's worker process did not report a result"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = str(-code)
        return f"the kernel's worker process was killed by signal {name} (crash or memory limit)"
    return f"the kernel's worker process exited with status {code} before reporting a result"


if __name__ == "__main__":
    worker_main()
