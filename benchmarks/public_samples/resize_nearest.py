"""resize_nearest_fixed_dma_kernel (reference vision kernel): nearest-neighbour resize of a
[10, 30, 20, 1280] float32 NHWC image to 59 x 38 (source index = floor(target index * in / out)),
launched with one program per batch as test_resize_nearest.py does."""

import numpy as np

IN_SHAPE = (10, 30, 20, 1280)
OUT_SHAPE = (10, 59, 38, 1280)
GRID = (IN_SHAPE[0],)
KERNEL_ARGS = {"out_shape": OUT_SHAPE}


def make_inputs(rng: np.random.Generator) -> list[np.ndarray]:
    return [rng.random(IN_SHAPE).astype(np.float32)]


def reference(image: np.ndarray) -> np.ndarray:
    in_h, in_w = IN_SHAPE[1:3]
    out_h, out_w = OUT_SHAPE[1:3]
    rows = np.floor(np.arange(out_h, dtype=np.float32) * np.float32(in_h / out_h)).astype(int)
    cols = np.floor(np.arange(out_w, dtype=np.float32) * np.float32(in_w / out_w)).astype(int)
    return image[:, rows[:, None], cols[None, :], :]
