"""How a check gets its cases: the profiler draws a reference's inputs once for the timed shapes and once
per seed, for a check at the timed size beside the kernel's recording rather than before it; a large
check's seeds are checked side by side in worker processes (accelopt_core/profiling/seeds.py), with the
verdict the profiler's own process gives on the same seeds, failures in seed order, and the user's
reference failing, a worker that dies and a cancelled check each said plainly; workers that end a check in
order serve the next one, for a while."""

from __future__ import annotations

import gc
import subprocess
import sys
import threading
import time
import weakref
from pathlib import Path

import pytest

from accelopt_core.profiling import SimulatorProfiler, TaskRef, seeds
from accelopt_core.tasks import TaskError

KERNEL = '''
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(x.shape[0] // 128):
        nl.store(out[i * 128:(i + 1) * 128, :], value=nl.multiply(nl.load(x[i * 128:(i + 1) * 128, :]), 2.0))
    return out
'''
# the public NKIBench form; every draw writes the thread that made it to DRAWS
REFERENCE = '''
import threading
import numpy as np

def get_inputs():
    with open(DRAWS, "a") as log:
        log.write(threading.current_thread().name + "\\n")
    return [np.random.normal(size=(rows(), 64)).astype(np.float32)]

def forward(x):
    return x * factor(x)
'''
SEEDS = [11, 12, 13, 14, 15]


def reference(tmp_path: Path, rows: str = "256", factor: str = "2.0") -> tuple[TaskRef, Path]:
    draws = tmp_path / "draws.txt"
    path = tmp_path / "ref.py"
    path.write_text(f"{REFERENCE}\nDRAWS = {str(draws)!r}\n\ndef rows():\n    return {rows}\n\n"
                    f"def factor(x):\n    return {factor}\n")
    return TaskRef(reference=str(path)), draws


@pytest.fixture(autouse=True)
def no_idle_workers():
    """Each test starts and ends with no worker left waiting from another check."""
    seeds.end_idle_workers()
    yield
    seeds.end_idle_workers()


@pytest.fixture
def in_workers(monkeypatch):
    """Every check with two seeds or more goes to two workers, however small its inputs."""
    monkeypatch.setattr(sys.modules["accelopt_core.profiling.profiler"], "worker_count",
                        lambda specs, count: 2 if count >= 2 else 0)


def test_a_timing_draws_the_inputs_once_and_counts_the_work_on_that_draw(tmp_path: Path) -> None:
    task, draws = reference(tmp_path)
    result = SimulatorProfiler().profile(KERNEL, task, check=False)
    assert result.error is None and result.peak_work and result.peak_work["counted"]
    assert draws.read_text().splitlines() == ["MainThread"]


def test_a_check_at_the_timed_size_draws_its_cases_beside_the_recording(tmp_path: Path) -> None:
    task, draws = reference(tmp_path)
    result = SimulatorProfiler(seeds=3).profile(KERNEL, task)
    assert result.correct, result.error or result.check_message
    threads = draws.read_text().splitlines()
    assert threads[0] == "MainThread" and len(threads) == 4  # the timed shapes, then one per seed
    assert all(name.startswith("accelopt-reference") for name in threads[1:])


def test_a_reference_whose_shapes_change_with_the_seed_is_told_so(tmp_path: Path) -> None:
    task, _ = reference(tmp_path, rows="128 * int(np.random.randint(1, 4))")
    result = SimulatorProfiler(seeds=5).profile(KERNEL, task, seeds=[1, 2, 3, 4, 5, 6, 7])
    assert result.correct is None
    assert "a check needs one set of input shapes per size" in (result.error or "")


def test_workers_give_the_verdict_the_profilers_own_process_gives(tmp_path: Path, monkeypatch) -> None:
    task, _ = reference(tmp_path, factor="np.float32(2.0) * (1 + 1e-7 * np.sign(x))")
    alone = SimulatorProfiler().profile(KERNEL, task, seeds=SEEDS)
    monkeypatch.setattr(sys.modules["accelopt_core.profiling.profiler"], "worker_count", lambda specs, count: 2)
    together = SimulatorProfiler().profile(KERNEL, task, seeds=SEEDS)
    assert alone.correct and together.correct, (alone.error, together.error)
    assert together.rel_l2_error == alone.rel_l2_error > 0 and together.max_abs_error == alone.max_abs_error
    assert together.latency_ms == alone.latency_ms and together.seeds == SEEDS


def test_the_first_failing_seed_in_order_is_reported(tmp_path: Path, in_workers) -> None:
    result = SimulatorProfiler().profile(KERNEL, reference(tmp_path, factor="3.0")[0], seeds=SEEDS)
    assert result.correct is False and result.error is None
    assert result.check_message.startswith(f"seed {SEEDS[0]}: relative L2 error")


def test_a_reference_that_fails_on_a_seed_is_named(tmp_path: Path, in_workers) -> None:
    """Bad input (a TaskError naming the reference's line), in a worker as in the profiler's own process."""
    task = reference(tmp_path, factor="undefined_name")[0]
    for seeds_checked in (SEEDS, SEEDS[:1]):  # one seed: no workers
        with pytest.raises(TaskError, match=r"ref\.py:\d+: forward\(\) raised NameError"):  # NKIBench form
            SimulatorProfiler().profile(KERNEL, task, seeds=seeds_checked)


def test_a_worker_that_dies_is_an_error_that_is_not_cached(tmp_path: Path, in_workers, monkeypatch) -> None:
    monkeypatch.setattr(seeds, "_start_worker", lambda: subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.buffer.read(1); sys.exit(3)"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE))
    profiler = SimulatorProfiler()
    result = profiler.profile(KERNEL, reference(tmp_path)[0])
    assert result.correct is None and "a check worker ended unexpectedly (exit status 3)" in result.error
    assert not profiler.cache


def test_a_cancelled_check_ends_its_workers(tmp_path: Path, in_workers, monkeypatch) -> None:
    started: list[subprocess.Popen[bytes]] = []
    cancel = threading.Event()

    def sleeper() -> subprocess.Popen[bytes]:
        """A worker that never answers; the check is cancelled once one runs (a fixed delay, on a loaded machine,
        could cancel before the check had started any)."""
        started.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE))
        threading.Timer(0.5, cancel.set).start()
        return started[-1]

    monkeypatch.setattr(seeds, "_start_worker", sleeper)
    began = time.monotonic()
    result = SimulatorProfiler().profile(KERNEL, reference(tmp_path)[0], cancel=cancel)
    assert time.monotonic() - began < 30 and result.correct is None and result.error == "evaluation cancelled"
    assert started and all(process.poll() is not None for process in started)


def test_workers_that_ended_a_check_in_order_check_the_next_one(tmp_path: Path, in_workers) -> None:
    task, _ = reference(tmp_path)
    first = SimulatorProfiler().profile(KERNEL, task, seeds=SEEDS)
    kept = [process.pid for process, _ in seeds._idle]
    second = SimulatorProfiler().profile(KERNEL, reference(tmp_path, factor="3.0")[0], seeds=SEEDS)
    assert first.correct and second.correct is False  # each check judged by its own reference
    assert len(kept) == 2 and sorted(process.pid for process, _ in seeds._idle) == sorted(kept)


def test_workers_of_a_check_that_went_wrong_are_not_kept(tmp_path: Path, in_workers, monkeypatch) -> None:
    monkeypatch.setattr(seeds, "_start_worker", lambda: subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.buffer.read(1); sys.exit(3)"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE))
    SimulatorProfiler().profile(KERNEL, reference(tmp_path)[0])
    assert seeds._idle == []


def test_an_idle_worker_ends_after_a_while(tmp_path: Path, in_workers, monkeypatch) -> None:
    monkeypatch.setattr(seeds, "IDLE_SECONDS", 0.5)
    assert SimulatorProfiler().profile(KERNEL, reference(tmp_path)[0], seeds=SEEDS).correct
    processes = [process for process, _ in seeds._idle]
    assert len(processes) == 2
    deadline = time.monotonic() + 20
    while (seeds._idle or any(process.poll() is None for process in processes)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert seeds._idle == [] and all(process.poll() is not None for process in processes)


def test_a_public_form_case_is_freed_when_dropped_without_waiting_for_the_collector(tmp_path: Path) -> None:
    """The profiler pauses the cyclic collector while it checks: a case in a reference cycle would keep its
    inputs and outputs (gigabytes at full size) for many checks."""
    path = tmp_path / "ref.py"
    path.write_text(f"{REFERENCE}\nDRAWS = {str(tmp_path / 'draws.txt')!r}\n\ndef rows():\n    return 256\n\n"
                    "def factor(x):\n    return 2.0\n\n"
                    "def transform_nki_outputs(k_res, ref):\n    return k_res\n")
    case = TaskRef(reference=str(path)).load().make_case(3)
    case.convert(case.reference())
    dropped = weakref.ref(case)
    gc.disable()
    try:
        del case
        assert dropped() is None
    finally:
        gc.enable()


CYCLIC_REFERENCE = '''
import numpy as np

def get_inputs():
    return [np.random.normal(size=(256, 64)).astype(np.float32)]

def forward(x):
    class Holder:
        pass
    holder = Holder()
    holder.itself, holder.data = holder, np.ones((64, 1 << 20), dtype=np.float32)  # 256 MiB in a cycle
    return x * 2.0
'''


def test_a_worker_frees_the_cycles_of_a_check_before_the_next(tmp_path: Path, in_workers) -> None:
    """What a check left in reference cycles (the reference's own, here 256 MiB per seed) is freed when the
    check ends, not kept by a worker that serves check after check."""
    path = tmp_path / "ref.py"
    path.write_text(CYCLIC_REFERENCE)
    sizes = []
    for draw in range(3):
        result = SimulatorProfiler().profile(KERNEL, TaskRef(reference=str(path)), seeds=[draw * 10 + k for k in SEEDS])
        assert result.correct, result.error or result.check_message
        sizes.append(max(_anonymous_bytes(process.pid) for process, _ in seeds._idle))
    assert sizes[-1] < sizes[0] + (256 << 20)


def _anonymous_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        return next(int(line.split()[1]) << 10 for line in status if line.startswith("RssAnon:"))
