"""NKIBench matmul: the peak work matches docs/nkibench.md."""

import numpy as np

from accelopt_core.tasks.registry import find_task


def test_peak_work_at_full_size() -> None:
    task = find_task("matmul")
    # M=4096, K=5120, N=12288: zero-stride arrays of the full shapes, nothing big is allocated
    a = np.broadcast_to(np.float32(0), (4096, 5120))
    b = np.broadcast_to(np.float32(0), (5120, 12288))
    work = task.peak_work([a, b])
    assert work.mm_flops == 515_396_075_520  # 2MNK
    assert work.vec_flops == 0
    assert work.hbm_bytes == 536_870_912  # 4(MN + NK + MK) = 4 * 134,217,728
