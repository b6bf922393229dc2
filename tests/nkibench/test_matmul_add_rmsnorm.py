"""NKIBench matmul_add_rmsnorm: the baseline passes the 5-seed check on the small sizes, and the
peak work at the full sizes is the nkibench.md formula."""

import numpy as np

from accelopt_core.nki import load_kernel
from accelopt_core.tasks.check import check_kernel
from accelopt_core.tasks.registry import find_task, task_files

TASK = "matmul_add_rmsnorm"


def full_shape(*shape: int) -> np.ndarray:
    """A zero-stride float32 array: the shape without the memory."""
    return np.broadcast_to(np.float32(0), shape)


def test_small_baseline_passes_the_check_on_five_seeds() -> None:
    task = find_task(f"{TASK}:small")
    kernel = load_kernel(task_files(TASK).kernel)
    result = check_kernel(kernel, task, seeds=[31, 32, 33, 34, 35])
    assert result.correct, result.message


def test_peak_work_at_full_size() -> None:
    # M=4096, K=2048, N=2048; inputs x (M x K), W (K x N), z (M x N), g (N)
    inputs = [full_shape(4096, 2048), full_shape(2048, 2048), full_shape(4096, 2048), full_shape(2048)]
    work = find_task(TASK).peak_work(inputs)
    assert work.mm_flops == 34_359_738_368  # 2MNK
    assert work.vec_flops == 50_331_648  # 6MN
    assert work.hbm_bytes == 117_448_704  # 4(MK + NK + MN + N + MN) = 4 * 29,362,176
