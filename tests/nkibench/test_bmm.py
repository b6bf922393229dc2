"""NKIBench bmm: the baseline kernel passes the check, and the peak work matches nkibench.md."""

from pathlib import Path

import numpy as np

from accelopt_core.nki import load_kernel
from accelopt_core.tasks.check import check_kernel
from accelopt_core.tasks.registry import find_task

ROOT = Path(__file__).resolve().parents[2]


def test_small_baseline_is_correct_on_five_seeds() -> None:
    task = find_task("bmm:small")
    kernel = load_kernel(str(ROOT / "nkibench" / "kernels" / "bmm.py"))
    result = check_kernel(kernel, task, seeds=[1, 2, 3, 4, 5])
    assert result.correct, result.message


def test_peak_work_at_full_size() -> None:
    task = find_task("bmm")
    # B=16, M=4096, K=64, N=4096
    a = np.broadcast_to(np.float32(0), (16, 4096, 64))
    b = np.broadcast_to(np.float32(0), (16, 64, 4096))
    work = task.peak_work([a, b])
    assert work.mm_flops == 34_359_738_368  # 2BMNK
    assert work.vec_flops == 0
    assert work.hbm_bytes == 1_107_296_256  # 4(BMN + BNK + BMK) = 4 * 276,824,064
