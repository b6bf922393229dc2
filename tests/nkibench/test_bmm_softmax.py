"""bmm_softmax: the peak work at the full size matches the docs/nkibench.md formulas
(2BMNK, 5BMN, 4(BMN + BNK + BMK))."""

import numpy as np

from accelopt_core.tasks.registry import find_task


def test_peak_work_at_full_size() -> None:
    # B=16, M=4096, K=64, N=4096: A is [B, M, K], B is [B, K, N]
    task = find_task("bmm_softmax")
    shapes = [(16, 4096, 64), (16, 64, 4096)]
    work = task.peak_work([np.broadcast_to(np.float32(0), shape) for shape in shapes])
    assert work.mm_flops == 34359738368
    assert work.vec_flops == 1342177280
    assert work.hbm_bytes == 1107296256
