"""NKIBench add_rmsnorm_matmul: the baseline passes the 5-seed check on the small sizes, and the
peak work at the full sizes is the nkibench.md formula."""

import numpy as np

from accelopt_core.nki import load_kernel
from accelopt_core.tasks.check import check_kernel
from accelopt_core.tasks.registry import find_task, task_files

TASK = "add_rmsnorm_matmul"


def full_shape(*shape: int) -> np.ndarray:
    """A zero-stride float32 array: the shape without the memory."""
    return np.broadcast_to(np.float32(0), shape)


def test_small_baseline_passes_the_check_on_five_seeds() -> None:
    task = find_task(f"{TASK}:small")
    kernel = load_kernel(task_files(TASK).kernel)
    result = check_kernel(kernel, task, seeds=[21, 22, 23, 24, 25])
    assert result.correct, result.message


def test_peak_work_at_full_size() -> None:
    # M=4096, K=1024, N=2048; inputs x, z (M x K), g (K), W (K x N)
    inputs = [full_shape(4096, 1024), full_shape(4096, 1024), full_shape(1024), full_shape(1024, 2048)]
    work = find_task(TASK).peak_work(inputs)
    assert work.mm_flops == 17_179_869_184  # 2MNK
    assert work.vec_flops == 25_165_824  # 6MK
    assert work.hbm_bytes == 75_501_568  # 4(2MK + KN + K + MN) = 4 * 18,875,392
