"""Where and how often the profiler draws a reference's inputs: once for the timed shapes, once per seed of
a check, and for a check at the timed size beside the kernel's recording rather than before it."""

from __future__ import annotations

from pathlib import Path

from accelopt_core.profiling import SimulatorProfiler, TaskRef

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
    return x * 2.0
'''


def reference(tmp_path: Path, rows: str = "256") -> tuple[TaskRef, Path]:
    draws = tmp_path / "draws.txt"
    path = tmp_path / "ref.py"
    path.write_text(f"{REFERENCE}\nDRAWS = {str(draws)!r}\n\ndef rows():\n    return {rows}\n")
    return TaskRef(reference=str(path)), draws


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
