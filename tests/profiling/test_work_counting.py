"""Counting a reference's NumPy work while it runs (accelopt_core/tasks/work.py): each rule on its own, and
the work reaching "% of peak" for a reference that declares none."""

from __future__ import annotations

import textwrap
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from accelopt_core.hardware import load_hardware
from accelopt_core.nki import TensorSpec
from accelopt_core.perfmodel import peak_times
from accelopt_core.profiling import SimulatorProfiler, TaskRef
from accelopt_core.profiling.guards import guard_violation
from accelopt_core.profiling.profiler import task_work
from accelopt_core.tasks import PeakWork, load_reference
from accelopt_core.tasks.work import ShapeOnlyError, count_work

RNG = np.random.default_rng(0)


def count(reference: Callable[..., Any], *inputs: Any) -> PeakWork:
    """The work counted on the data, pinned equal to the work counted on the shapes alone."""
    _, work = count_work(lambda wrap: reference(*[wrap(a) for a in inputs]))
    assert work is not None
    _, by_shape = count_work(lambda wrap: reference(*[wrap(a) for a in inputs]), shapes_only=True)
    assert by_shape == work
    return work


def a(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def flops(work: PeakWork) -> tuple[float, float]:
    return work.mm_flops, work.vec_flops


@pytest.mark.parametrize("product", [lambda x, y: x @ y, np.matmul, np.dot, lambda x, y: x.dot(y),
                                     lambda x, y: np.einsum("mk,kn->mn", x, y),
                                     lambda x, y: np.tensordot(x, y, axes=1), lambda x, y: np.inner(x, y.T),
                                     lambda x, y: np.tensordot(x, y, axes=([1], [0]))])
def test_a_matrix_product_is_two_flops_per_multiply_add(product: Callable[..., Any]) -> None:
    assert flops(count(product, a(8, 16), a(16, 4))) == (2 * 8 * 4 * 16, 0)


def test_batched_products_and_their_broadcast() -> None:
    batched = (3 * 2 * 8 * 4 * 16, 0)
    assert flops(count(np.matmul, a(3, 8, 16), a(16, 4))) == batched
    assert flops(count(lambda x, y: np.einsum("bmk,bkn->bmn", x, y), a(3, 8, 16), a(3, 16, 4))) == batched
    assert flops(count(lambda x, y: np.einsum("...mk,...kn", x, y), a(3, 8, 16), a(3, 16, 4))) == batched


@pytest.mark.parametrize(("product", "shapes", "multiply_adds"), [
    (np.matmul, ((8, 16), (16,)), 8 * 16), (np.dot, ((16,), (16, 4)), 16 * 4), (np.dot, ((16,), (16,)), 16),
    (np.vdot, ((4, 4), (4, 4)), 16), (np.matmul, ((8, 16), (16, 1)), 8 * 16)])
def test_a_product_with_a_vector_side_is_vector_work(product: Callable[..., Any], shapes: Any,
                                                     multiply_adds: int) -> None:
    assert flops(count(product, *(a(*shape) for shape in shapes))) == (0, 2 * multiply_adds)


def test_element_wise_ops_reductions_and_selects() -> None:
    x, y = a(8, 16), a(8, 16)
    assert flops(count(lambda p, q: np.exp(p) + q, x, y)) == (0, 2 * 128)
    assert flops(count(lambda p: p.max(axis=1, keepdims=True), x)) == (0, 128)
    assert flops(count(lambda p: np.mean(p * p, axis=-1), x)) == (0, 2 * 128)  # its /16 scales 8 sums: folded
    assert flops(count(lambda p: np.cumsum(p, axis=0), x)) == (0, 128)
    assert flops(count(lambda p, q: np.where(p > 0, p, q), x, y)) == (0, 2 * 128)  # the compare and the select
    assert flops(count(lambda p: np.maximum(p, 0.0), x)) == (0, 128)
    assert flops(count(lambda p: np.outer(p[0], p[1]), x)) == (0, 16 * 16)
    assert flops(count(np.linalg.norm, x)) == (0, 2 * 128)


def test_scaling_by_a_constant_folds_and_an_added_constant_counts() -> None:
    x, y = a(8, 16), a(8, 16)
    assert count(lambda p: -p * 0.5 / 3.0, x).vec_flops == 0
    assert count(lambda p: 1.0 + p, x).vec_flops == 128
    assert count(lambda p: 2.0 / p, x).vec_flops == 128  # a reciprocal, not a scaling
    assert count(lambda p: p * np.float32(np.sqrt(64)), x).vec_flops == 0
    assert count(lambda p, q: p * q, x, y).vec_flops == 128
    assert count(lambda p: p / p.max(), x).vec_flops == 2 * 128  # a value from the inputs is no constant
    assert count(lambda p: p * x.size, x).vec_flops == 0


def test_in_place_updates_are_counted() -> None:
    def softmax(s: np.ndarray) -> np.ndarray:
        s = s.astype(np.float64)
        s -= s.max(axis=1, keepdims=True)
        np.exp(s, out=s)
        s /= s.sum(axis=1, keepdims=True)
        return s

    assert count(softmax, a(8, 16)).vec_flops == 5 * 128


def test_counting_follows_conversions_and_copies() -> None:
    x = a(8, 16)
    assert count(lambda p: np.asarray(p, dtype=np.float64) * p, x).vec_flops == 128
    assert count(lambda p: np.array(p) + np.ascontiguousarray(p.T).T, x).vec_flops == 128
    assert count(lambda p: np.concatenate([p, p]) + 1.0, x).vec_flops == 2 * 128
    assert not hasattr(np.asarray, "__wrapped__")  # NumPy's own again afterwards


def test_work_on_arrays_not_made_from_the_inputs_is_not_counted() -> None:
    assert count(lambda p: p + np.ones(4) @ np.ones(4), a(8, 16)).vec_flops == 128


def test_bytes_are_the_inputs_and_outputs_at_the_inputs_precision() -> None:
    x, y = a(8, 16), a(16, 4)
    assert count(lambda p, q: (p.astype(np.float64) @ q.astype(np.float64)), x, y).hbm_bytes == 4 * (128 + 64 + 32)
    assert count(lambda p: (p.sum(axis=1), p * p), x).hbm_bytes == 4 * (128 + 8 + 128)
    assert count(lambda p, eps: p + eps, x, 1e-5).hbm_bytes == 4 * (128 + 128)  # a Python number is no input


@pytest.mark.parametrize("reference", [lambda p: p[p > 0] * 2.0, lambda p: np.nonzero(p)[0] + 1.0,
                                       lambda p: p * 2.0 if p.max() > 0 else p, lambda p: np.zeros(int(p.sum())),
                                       lambda p: np.unique(p), lambda p: np.where(p > 0)[0], lambda p: p.item(0)])
def test_a_count_by_shapes_refuses_what_depends_on_the_values(reference: Callable[..., Any]) -> None:
    """A mask, a branch, a size or a number taken from the data: only the data can say what is computed."""
    with pytest.raises(ShapeOnlyError):
        count_work(lambda wrap: reference(wrap(a(8, 16))), shapes_only=True)


def test_a_count_by_shapes_holds_no_data() -> None:
    """A full-size attention (16 heads of 4096 x 4096 scores, 1 GiB a temporary) counted in no memory."""
    q = np.broadcast_to(np.zeros((), np.float32), (16, 4096, 128))

    def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
        scores = q @ k.transpose(0, 2, 1) / np.float32(np.sqrt(128))
        weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
        return (weights / weights.sum(axis=-1, keepdims=True)) @ v

    result, work = count_work(lambda wrap: attention(wrap(q), wrap(q), wrap(q)), shapes_only=True)
    assert result.shape == (16, 4096, 128) and not np.asarray(result).strides[0]
    assert work is not None and work.mm_flops == 2 * 2 * 16 * 4096 * 4096 * 128
    assert work.vec_flops == 5 * 16 * 4096 * 4096  # max, subtract, exp, sum and divide; the scaling folds


def test_nothing_is_counted_without_numpy_inputs() -> None:
    result, work = count_work(lambda wrap: wrap([1.0, 2.0]))
    assert result == [1.0, 2.0] and work is None


def test_counted_work_is_no_minimum_for_the_guards() -> None:
    """A reference may do more than needed ((x @ A) @ B where x @ (A @ B) is cheaper): counted work cannot
    accuse a kernel of skipping work; a declared peak_work can."""
    facts = {"hardware_flops": 10, "transpose_flops": 0, "hbm_read_bytes": 10, "hbm_write_bytes": 0}
    assert guard_violation(facts, PeakWork(1000, 0, 1000, counted=True)) is None
    assert guard_violation(facts, PeakWork(1000, 0, 1000)) is not None


NATIVE = '''
import numpy as np

def make_inputs(rng):
    return [rng.standard_normal((2, 128, 512), dtype=np.float32), rng.standard_normal((256, 512), dtype=np.float32)]

def reference(x, y):
    return x.reshape(256, 512) * y + 1.0
'''
PUBLIC = '''
import numpy as np

def get_inputs():
    return [np.random.normal(size=(256, 512)).astype(np.float32), np.random.normal(size=(256, 512)).astype(np.float32)]

def forward(x, y):
    return x * y + 1.0

def transform_to_nki_inputs(inputs):
    return [np.reshape(inputs[0], (2, 128, 512)), inputs[1]]
'''
DECLARED = NATIVE + '''
from accelopt_core.tasks import PeakWork

def peak_work(x, y):
    return PeakWork(mm_flops=0, vec_flops=1, hbm_bytes=2)
'''
KERNEL = '''
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def kernel(x, y):
    out = nl.ndarray(y.shape, dtype=y.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(2):
        a = nl.load(x[i])
        b = nl.load(y[i * 128:(i + 1) * 128, :])
        nl.store(out[i * 128:(i + 1) * 128, :], value=nl.add(nl.multiply(a, b), 1.0))
    return out
'''


@pytest.mark.parametrize("source", [NATIVE, PUBLIC])
def test_either_reference_form_gets_a_peak_from_its_counted_work(tmp_path: Path, source: str) -> None:
    path = tmp_path / "ref.py"
    path.write_text(source)
    work = PeakWork(0, 2 * 256 * 512, 3 * 4 * 256 * 512, counted=True)
    assert load_reference(str(path)).counted_work() == work
    result = SimulatorProfiler().profile(KERNEL, TaskRef(reference=str(path)))
    assert result.correct, result.check_message or result.error
    assert result.peak_work == {"mm_flops": 0, "vec_flops": 2 * 256 * 512, "hbm_bytes": 3 * 4 * 256 * 512,
                                "counted": True, "mm_dtype": "float32"}
    assert result.bound == "memory" and result.peak_percent is not None and 0 < result.peak_percent <= 100
    assert "counted from the reference" in result.bound_text()


def test_a_declared_peak_work_overrides_the_count(tmp_path: Path) -> None:
    path = tmp_path / "ref.py"
    path.write_text(DECLARED)
    task = load_reference(str(path))
    assert task.count_key is None and task.counted_work() is None
    specs = [TensorSpec.of(x) for x in task.make_case(0).inputs]
    assert task_work(task, specs, None) == PeakWork(0, 1, 2)


def test_floating_point_warnings_point_at_the_reference_and_raising_stays_raising() -> None:
    big = np.full(4, 1000.0, dtype=np.float32)
    with pytest.warns(RuntimeWarning, match="overflow encountered in exp") as caught:
        count(lambda p: np.exp(p), big)
    assert caught[0].filename == __file__
    with np.errstate(over="raise"), pytest.raises(FloatingPointError):
        count(lambda p: np.exp(p), big)


def test_counting_by_shapes_raises_no_warning_of_its_own() -> None:
    """The shape-only probes compute on zeros: 0 / 0 must not warn as if the reference had."""
    def normalise(wrap):
        x = wrap(np.ones((128, 64), np.float32))
        return x / np.linalg.norm(x, axis=-1, keepdims=True)

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        count_work(normalise, shapes_only=True)


def test_a_bfloat16_task_peaks_at_the_bfloat16_matmul_rate(tmp_path: Path) -> None:
    """A reference that widens bfloat16 inputs to multiply them: the kernel may multiply at bfloat16's rate
    (4x FP32's on trn1) and write the result at the inputs' width; NKIBench's float32 peak put a
    bfloat16 kernel at 222 % of it."""
    path = tmp_path / "ref.py"
    path.write_text(textwrap.dedent('''
        import ml_dtypes
        import numpy as np


        def make_inputs(rng):
            return [rng.standard_normal((256, 128)).astype(ml_dtypes.bfloat16),
                    rng.standard_normal((128, 512)).astype(ml_dtypes.bfloat16)]


        def reference(a, b):
            return a.astype(np.float32) @ b.astype(np.float32)
    '''))
    work = load_reference(str(path)).counted_work()
    assert work.mm_dtype == "bfloat16" and work.mm_flops == 2 * 256 * 128 * 512
    assert work.hbm_bytes == 2 * (256 * 128 + 128 * 512 + 256 * 512)  # the output at the inputs' width
    trn1 = load_hardware("trn1")
    fp32 = peak_times(work.mm_flops, 0, 0, trn1)["matmul"]
    assert peak_times(work.mm_flops, 0, 0, trn1, work.mm_dtype)["matmul"] == pytest.approx(fp32 / 4)
