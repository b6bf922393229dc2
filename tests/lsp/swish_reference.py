"""A public-form (NKIBench) reference for tests/rules/kernels/compiler_swish.py: x * sigmoid(x)."""

import numpy as np


def get_inputs():
    return [np.random.normal(loc=0, scale=1.0, size=(256, 1024)).astype(np.float32)]


def forward(x):
    return x / (1 + np.exp(-x))
