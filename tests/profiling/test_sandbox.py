"""Untrusted kernels in the sandbox: every way a candidate can misbehave costs one failed
evaluation with a clear reason, never the caller."""

from __future__ import annotations

import importlib.util
import os
import py_compile
from pathlib import Path

import pytest

import accelopt_core
from accelopt_core.profiling import SandboxLimits, SimulatorProfiler, TaskRef
from accelopt_core.tasks.registry import task_files

SILU = Path(task_files("silu").kernel).read_text()
TASK = TaskRef("silu")


def candidate(body: str, before_return: bool = True) -> str:
    """The silu baseline with `body` inserted at the start of the kernel function."""
    marker = "    rows, cols = x.shape\n"
    return SILU.replace(marker, body + marker) if before_return else SILU + body


@pytest.fixture(scope="module")
def profiler() -> SimulatorProfiler:
    return SimulatorProfiler(seeds=2, check_variant="small", limits=SandboxLimits(seconds=20, memory_mb=2048))


def test_honest_candidate_passes(profiler: SimulatorProfiler) -> None:
    result = profiler.profile(SILU, TASK)
    assert result.ok and result.correct is True and result.latency_ms > 0


def test_hang_is_stopped(profiler: SimulatorProfiler) -> None:
    quick = SimulatorProfiler(seeds=1, check_variant="small", limits=SandboxLimits(seconds=3))
    result = quick.profile(candidate("    while True:\n        pass\n"), TASK)
    assert "did not finish within 3 s" in result.error


def test_huge_allocation_is_refused(profiler: SimulatorProfiler) -> None:
    result = profiler.profile(candidate("    import numpy\n    numpy.ones(50 * 2**30 // 8)\n"), TASK)
    assert "memory" in result.error.lower()
    result = profiler.profile(candidate("    x = bytearray(50 * 2**30)\n"), TASK)
    assert "MemoryError: out of memory (the sandbox's memory limit)" in result.error


def test_early_exit_is_a_failure(profiler: SimulatorProfiler) -> None:
    result = profiler.profile(candidate("    import os\n    os._exit(3)\n"), TASK)
    assert result.error == "the kernel's worker process exited with status 3 before reporting a result"


def test_the_worker_leaves_once_its_result_is_written(profiler: SimulatorProfiler) -> None:
    """Nothing after the result holds the evaluation: the interpreter's teardown (here an exit handler the
    kernel registered, in real runs a last walk over everything the recording made) is skipped."""
    result = profiler.profile(candidate("    import atexit, time\n    atexit.register(time.sleep, 60)\n"), TASK)
    assert result.error is None and result.correct is True


def test_segfault_is_a_failure(profiler: SimulatorProfiler) -> None:
    result = profiler.profile(candidate("    import faulthandler\n    faulthandler._sigsegv()\n"), TASK)
    assert "SIGSEGV" in result.error


def test_writing_outside_the_workdir_is_refused(profiler: SimulatorProfiler, tmp_path: Path) -> None:
    target = tmp_path / "escaped.txt"
    result = profiler.profile(candidate(f"    open({str(target)!r}, 'w').write('x')\n"), TASK)
    assert "not allowed" in result.error and not target.exists()


def test_reference_is_not_readable(profiler: SimulatorProfiler) -> None:
    reference = task_files("silu").reference
    result = profiler.profile(candidate(f"    open({reference!r}).read()\n"), TASK)
    assert "not allowed" in result.error


def test_reference_is_not_importable(profiler: SimulatorProfiler) -> None:
    # under bubblewrap the reference is not even there (only accelopt_core of this checkout is visible);
    # unconfined, the audit hook refuses it
    result = profiler.profile(candidate("    import nkibench.reference.silu\n"), TASK)
    assert "No module named 'nkibench" in result.error or "not allowed" in result.error


def test_memory_database_cannot_be_opened(profiler: SimulatorProfiler) -> None:
    result = profiler.profile(candidate("    import sqlite3\n    sqlite3.connect('memory.db')\n"), TASK)
    assert "sqlite3.connect is not allowed" in result.error


def test_subprocesses_are_refused(profiler: SimulatorProfiler) -> None:
    result = profiler.profile(candidate("    import subprocess\n    subprocess.run(['true'])\n"), TASK)
    assert "not allowed" in result.error


def test_secrets_are_not_inherited(profiler: SimulatorProfiler, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-do-not-leak")
    monkeypatch.setenv("ACCELOPT_LLM_API_KEY", "also-secret")
    fresh = SimulatorProfiler(seeds=1, check_variant="small")
    body = "    import os\n    raise RuntimeError(repr(sorted(k for k in os.environ if 'KEY' in k)))\n"
    result = fresh.profile(candidate(body), TASK)
    assert "RuntimeError: []" in result.error
    assert os.environ["OPENAI_API_KEY"] == "sk-do-not-leak"  # the caller's own environment is untouched


def test_worker_runs_this_checkout_even_when_it_is_not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    """A child starts with a bare PYTHONPATH and cwd elsewhere, yet imports the same accelopt_core."""
    monkeypatch.setenv("PYTHONPATH", "/nonexistent")
    monkeypatch.chdir("/")
    fresh = SimulatorProfiler(seeds=1, check_variant="small")
    body = "    import accelopt_core\n    raise RuntimeError(accelopt_core.__file__)\n"
    result = fresh.profile(candidate(body), TASK)
    assert f"RuntimeError: {accelopt_core.__file__}" in result.error


def test_a_reference_beside_the_kernel_is_not_importable_even_when_compiled(tmp_path: Path) -> None:
    # the kernel's folder is importable (helper modules), so the reference's cached bytecode must be
    # as closed as the reference itself
    reference = tmp_path / "pair_ref.py"
    reference.write_text("import numpy as np\n\ndef make_inputs(rng):\n    return [np.ones((128, 4), np.float32)]\n\n"
                         "def reference(x):\n    return x * 2\n")
    py_compile.compile(str(reference), cfile=importlib.util.cache_from_source(str(reference)))
    kernel = tmp_path / "pair.py"
    kernel.write_text("import neuronxcc.nki as nki\nimport neuronxcc.nki.language as nl\nimport pair_ref\n\n\n"
                      "@nki.jit\ndef kernel(x):\n    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)\n"
                      "    nl.store(out, value=nl.multiply(nl.load(x), 2.0))\n    return out\n")
    result = SimulatorProfiler(seeds=1).profile(kernel.read_text(), TaskRef(reference=str(reference)),
                                                kernel_label=str(kernel))
    # covered by an empty device file under bubblewrap (no module of that name), refused by the audit hook
    assert result.error is not None
    assert "No module named 'pair_ref'" in result.error or "not allowed" in result.error


def test_folders_of_killed_processes_are_removed_and_live_ones_kept(tmp_path: Path) -> None:
    import subprocess
    import time

    from accelopt_core.profiling.sandbox import ORPHAN_AGE_SECONDS, WORKDIR_PREFIX, remove_orphaned_workdirs

    child = subprocess.Popen(["true"])  # a process that has exited and been reaped: its id names no process
    child.wait()
    dead_pid = child.pid
    old = time.time() - ORPHAN_AGE_SECONDS - 60
    folders = {name: tmp_path / name for name in (f"{WORKDIR_PREFIX}{dead_pid}-old", f"{WORKDIR_PREFIX}{dead_pid}-new",
                                                  f"{WORKDIR_PREFIX}{os.getpid()}-mine", f"{WORKDIR_PREFIX}legacy",
                                                  "unrelated")}
    for folder in folders.values():
        folder.mkdir()
        (folder / "job.pkl").write_bytes(b"")
    for name in (f"{WORKDIR_PREFIX}{dead_pid}-old", f"{WORKDIR_PREFIX}{os.getpid()}-mine", "unrelated"):
        os.utime(folders[name], (old, old))
    assert remove_orphaned_workdirs(str(tmp_path)) == [str(folders[f"{WORKDIR_PREFIX}{dead_pid}-old"])]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(set(folders) - {f"{WORKDIR_PREFIX}{dead_pid}-old"})
