"""NKIBench rmsnorm_matmul: the peak work at the full sizes is the docs/nkibench.md formula."""

import numpy as np

from accelopt_core.tasks.registry import find_task

TASK = "rmsnorm_matmul"


def full_shape(*shape: int) -> np.ndarray:
    """A zero-stride float32 array: the shape without the memory."""
    return np.broadcast_to(np.float32(0), shape)


def test_peak_work_at_full_size() -> None:
    # M=4096, K=1024, N=2048
    work = find_task(TASK).peak_work([full_shape(4096, 1024), full_shape(1024, 2048)])
    assert work.mm_flops == 17_179_869_184  # 2MNK
    assert work.vec_flops == 16_777_216  # 4MK
    assert work.hbm_bytes == 58_720_256  # 4(MK + KN + MN) = 4 * 14,680,064
