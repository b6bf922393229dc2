"""select_and_scatter_kernel (reference vision kernel): 3 x 3 windows with stride 2 and padding 1 over
an [8, 64, 112, 112] float32 operand; each window's first maximum receives the matching element of
the [8, 64, 56, 56] source, summed where windows overlap (test_select_and_scatter.py)."""

import numpy as np

WINDOW, STRIDE, PAD = 3, 2, 1


def make_inputs(rng: np.random.Generator) -> list[np.ndarray]:
    return [rng.random((8, 64, 112, 112)).astype(np.float32), rng.random((8, 64, 56, 56)).astype(np.float32)]


def reference(operand: np.ndarray, source: np.ndarray) -> np.ndarray:
    n, c, h, w = operand.shape
    src_h, src_w = source.shape[2:]
    padded = np.pad(operand, ((0, 0), (0, 0), (PAD, PAD), (PAD, PAD)), constant_values=-np.inf)
    rows = STRIDE * np.arange(src_h)[:, None] + np.arange(WINDOW)[None, :]  # [src_h, WINDOW]
    cols = STRIDE * np.arange(src_w)[:, None] + np.arange(WINDOW)[None, :]
    windows = padded[:, :, rows[:, None, :, None], cols[None, :, None, :]]  # n, c, src_h, src_w, 3, 3
    first_max = windows.reshape(n, c, src_h, src_w, WINDOW * WINDOW).argmax(axis=-1)
    target_h = STRIDE * np.arange(src_h)[:, None] + first_max // WINDOW - PAD
    target_w = STRIDE * np.arange(src_w)[None, :] + first_max % WINDOW - PAD
    out = np.zeros((n, c, h, w), dtype=np.float64)
    batch = np.arange(n)[:, None, None, None]
    channel = np.arange(c)[None, :, None, None]
    np.add.at(out, (batch, channel, target_h, target_w), source)
    return out.astype(np.float32)
