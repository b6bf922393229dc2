"""rope_single_freq_apply: the peak work at the full size matches the docs/nkibench.md formulas (0, 3BHND, 12BHND)."""

import numpy as np

from accelopt_core.tasks.registry import find_task


def test_peak_work_at_full_size() -> None:
    # B=1, H=64, N=4096, D=128: x is [D, B*H*N], cos and sin are [D/2, B*H*N]
    task = find_task("rope_single_freq_apply")
    shapes = [(128, 262144), (64, 262144), (64, 262144)]
    work = task.peak_work([np.broadcast_to(np.float32(0), shape) for shape in shapes])
    assert work.mm_flops == 0
    assert work.vec_flops == 100663296
    assert work.hbm_bytes == 402653184
