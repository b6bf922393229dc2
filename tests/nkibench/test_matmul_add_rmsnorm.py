"""NKIBench matmul_add_rmsnorm: the peak work at the full sizes is the docs/nkibench.md formula."""

import numpy as np

from accelopt_core.tasks.registry import find_task

TASK = "matmul_add_rmsnorm"


def full_shape(*shape: int) -> np.ndarray:
    """A zero-stride float32 array: the shape without the memory."""
    return np.broadcast_to(np.float32(0), shape)


def test_peak_work_at_full_size() -> None:
    # M=4096, K=2048, N=2048; inputs x (M x K), W (K x N), z (M x N), g (N)
    inputs = [full_shape(4096, 2048), full_shape(2048, 2048), full_shape(4096, 2048), full_shape(2048)]
    work = find_task(TASK).peak_work(inputs)
    assert work.mm_flops == 34_359_738_368  # 2MNK
    assert work.vec_flops == 50_331_648  # 6MN
    assert work.hbm_bytes == 117_448_704  # 4(MK + NK + MN + N + MN) = 4 * 29,362,176
