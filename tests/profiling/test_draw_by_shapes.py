"""A reference's inputs drawn without their data (accelopt_core/tasks/shapes.py): the shapes and dtypes of a
real draw in no time, NumPy's own random functions for every other thread meanwhile, and a real draw
wherever the reference needs its values."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from accelopt_core.nki import TensorSpec
from accelopt_core.tasks import load_reference
from accelopt_core.tasks.shapes import random_without_data
from accelopt_core.tasks.work import ShapeOnlyError, Tally

PUBLIC = '''
import numpy as np

def get_inputs():
    x = np.random.normal(loc=0, scale=1.0, size=(4096, 8192)).astype(np.float32)
    w = (np.random.rand(8192, 64) * 0.1).astype(np.float16)
    eps = 1e-6
    return [x, w, np.abs(np.random.randn(64)).astype(np.float32), np.float32(eps)]

def forward(x, w, gain, eps):
    return (x @ w.astype(np.float32)) * gain + eps

def transform_to_nki_inputs(inputs):
    return [np.reshape(inputs[0], (32, 128, 8192)), inputs[1], inputs[2], inputs[3]]
'''
NATIVE = '''
import numpy as np

def make_inputs(rng):
    return [rng.standard_normal((2048, 2048), dtype=np.float32), rng.integers(0, 10, size=(2048,), dtype=np.int32)]

def reference(x, k):
    return x * 2.0 + 1.0
'''


def specs(arrays: list[np.ndarray]) -> list[TensorSpec]:
    return [TensorSpec.of(a) for a in arrays]


@pytest.mark.parametrize("source", [PUBLIC, NATIVE])
def test_a_draw_by_shapes_has_the_shapes_of_a_real_draw_and_no_data(tmp_path: Path, source: str) -> None:
    path = tmp_path / "ref.py"
    path.write_text(source)
    task = load_reference(str(path))
    by_shapes, real = task.shape_case(), task.make_case(0)
    assert specs(by_shapes.inputs) == specs(real.inputs)
    assert all(not a.strides or not any(a.strides) for a in by_shapes.inputs if a.ndim)  # no data behind them
    assert by_shapes.counted_work(True) == real.counted_work()
    with pytest.raises(Exception, match="no reference outputs"):
        by_shapes.reference()


@pytest.mark.parametrize("draw", ["np.zeros((256, int(np.random.normal(size=3)[0]) * 0 + 64), np.float32)",
                                  "np.full((256, 64), np.random.rand(), np.float32)",
                                  "np.random.normal(size=(256, 64)).astype(np.float32) * np.float32(np.random.rand())"])
def test_a_draw_that_needs_its_values_is_drawn_for_real(tmp_path: Path, draw: str) -> None:
    path = tmp_path / "ref.py"
    path.write_text(f"import numpy as np\n\ndef get_inputs():\n    return [{draw}]\n\n"
                    "def forward(x):\n    return x + x\n")
    case = load_reference(str(path)).shape_case()
    assert case.inputs[0].shape == (256, 64) and all(case.inputs[0].strides)  # real arrays
    assert np.array_equal(case.reference()[0], 2 * case.inputs[0])


def test_only_the_drawing_thread_sees_arrays_without_data() -> None:
    seen: list[np.ndarray] = []
    inside, done = threading.Event(), threading.Event()

    def other() -> None:
        inside.wait()
        seen.append(np.random.normal(size=(4, 4)))
        done.set()

    threading.Thread(target=other).start()
    with random_without_data(Tally(shapes_only=True)) as rng:
        ghost = np.random.normal(size=(1024, 1024))
        inside.set()
        done.wait(10)
        assert ghost.shape == (1024, 1024) and not any(ghost.strides)
        assert rng.standard_normal((8, 8), dtype=np.float32).dtype == np.float32
        with pytest.raises(ShapeOnlyError):
            rng.permutation(8)
    assert seen[0].strides == (32, 8) and np.unique(seen[0]).size == 16  # a real draw
    assert np.random.normal(size=(4, 4)).strides == (32, 8)  # NumPy's own again
