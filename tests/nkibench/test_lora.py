"""NKIBench lora: the peak work matches docs/nkibench.md; the reference is x @ W + (x @ A) @ B in float64."""

import importlib.util

import numpy as np

from accelopt_core.tasks.registry import find_task, task_files


def test_peak_work_at_full_size() -> None:
    task = find_task("lora")
    # M=4096, K=5120, N=12288, R=128: x is M x K, W is K x N, A is K x R, B is R x N
    x = np.broadcast_to(np.float32(0), (4096, 5120))
    w = np.broadcast_to(np.float32(0), (5120, 12288))
    a = np.broadcast_to(np.float32(0), (5120, 128))
    b = np.broadcast_to(np.float32(0), (128, 12288))
    work = task.peak_work([x, w, a, b])
    # 2MNK + 2MKR + 2MNR = 515,396,075,520 + 5,368,709,120 + 12,884,901,888
    assert work.mm_flops == 533_649_686_528
    assert work.vec_flops == 50_331_648  # MN
    # 4(MK + KN + KR + RN + MN) = 4(20,971,520 + 62,914,560 + 655,360 + 1,572,864 + 50,331,648)
    assert work.hbm_bytes == 545_783_808


def test_the_reference_by_blocks_is_the_whole_float64_product() -> None:
    """Computed by blocks of output columns (its float64 products a block's size), the reference is the whole
    float64 formula rounded to float32, to a float32 unit in the last place."""
    spec = importlib.util.spec_from_file_location("lora_reference", task_files("lora").reference)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    rng = np.random.default_rng(7)
    x, w, a, b = module.make_inputs(rng, M=256, K=640, N=2 * module.COLUMNS + 128, R=16)
    x64 = x.astype(np.float64)
    whole = (x64 @ w.astype(np.float64) + (x64 @ a.astype(np.float64)) @ b.astype(np.float64)).astype(np.float32)
    np.testing.assert_array_max_ulp(module.reference(x, w, a, b), whole, maxulp=1)
