"""NKIBench bmm: the peak work matches docs/nkibench.md."""

import numpy as np

from accelopt_core.tasks.registry import find_task


def test_peak_work_at_full_size() -> None:
    task = find_task("bmm")
    # B=16, M=4096, K=64, N=4096
    a = np.broadcast_to(np.float32(0), (16, 4096, 64))
    b = np.broadcast_to(np.float32(0), (16, 64, 4096))
    work = task.peak_work([a, b])
    assert work.mm_flops == 34_359_738_368  # 2BMNK
    assert work.vec_flops == 0
    assert work.hbm_bytes == 1_107_296_256  # 4(BMN + BNK + BMK) = 4 * 276,824,064
