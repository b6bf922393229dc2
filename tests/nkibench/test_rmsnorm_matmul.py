"""NKIBench rmsnorm_matmul: the baseline passes the 5-seed check on the small sizes, and the peak
work at the full sizes is the nkibench.md formula."""

import numpy as np

from accelopt_core.nki import load_kernel
from accelopt_core.tasks.check import check_kernel
from accelopt_core.tasks.registry import find_task, task_files

TASK = "rmsnorm_matmul"


def full_shape(*shape: int) -> np.ndarray:
    """A zero-stride float32 array: the shape without the memory."""
    return np.broadcast_to(np.float32(0), shape)


def test_small_baseline_passes_the_check_on_five_seeds() -> None:
    task = find_task(f"{TASK}:small")
    kernel = load_kernel(task_files(TASK).kernel)
    result = check_kernel(kernel, task, seeds=[11, 12, 13, 14, 15])
    assert result.correct, result.message


def test_peak_work_at_full_size() -> None:
    # M=4096, K=1024, N=2048
    work = find_task(TASK).peak_work([full_shape(4096, 1024), full_shape(1024, 2048)])
    assert work.mm_flops == 17_179_869_184  # 2MNK
    assert work.vec_flops == 16_777_216  # 4MK
    assert work.hbm_bytes == 58_720_256  # 4(MK + KN + MN) = 4 * 14,680,064
