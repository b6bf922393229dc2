"""NKIBench swiglu: the peak work at the full sizes is the docs/nkibench.md formula."""

import numpy as np

from accelopt_core.tasks.registry import find_task

TASK = "swiglu"


def full_shape(*shape: int) -> np.ndarray:
    """A zero-stride float32 array: the shape without the memory."""
    return np.broadcast_to(np.float32(0), shape)


def test_peak_work_at_full_size() -> None:
    # M=4096, K=1024, N=3072; inputs x (M x K), Wgate and Wup (K x N), Wdown (N x K)
    inputs = [full_shape(4096, 1024), full_shape(1024, 3072), full_shape(1024, 3072), full_shape(3072, 1024)]
    work = find_task(TASK).peak_work(inputs)
    assert work.mm_flops == 77_309_411_328  # 6MKN
    assert work.vec_flops == 62_914_560  # 5MN
    assert work.hbm_bytes == 71_303_168  # 4(2MK + 3KN) = 4 * 17,825,792
