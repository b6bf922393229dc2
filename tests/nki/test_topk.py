"""nisa.topk (the `nki` API, NeuronCore-v3 and later) against a NumPy top-k, as the NKI 0.7 ISA page describes it:
every 16 partitions hold one problem read as a snake (element e at partition e % 16, column e // 16), the k largest
of its first n elements land in the same snake layout of val_dst (k: its columns), their positions in idx_dst; with
`sorted` result j is the j-th largest, without it the order is open (the simulator: the positions' order). The
limits are NKI 0.6's constraints list."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from accelopt_core.hardware import load_hardware
from accelopt_core.nki import HardwareRuleError, KernelUsageError
from accelopt_core.perfmodel.costs import CostModel

GROUP = 16
SENTINEL_VALUE, SENTINEL_INDEX = -7.0, 7  # what the kernel puts in val_dst / idx_dst before the top-k

KERNEL = """
import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def kernel(a):
    partitions, columns = a.shape
    values = nl.ndarray((partitions, {k}), dtype=nl.bfloat16, buffer=nl.shared_hbm)
    indices = nl.ndarray((partitions, {k}), dtype=nl.uint32, buffer=nl.shared_hbm)
    src = nl.ndarray(a.shape, dtype={src_dtype}, buffer=nl.sbuf)
    val = nl.ndarray((partitions, {k}), dtype=nl.bfloat16, buffer=nl.sbuf)
    idx = nl.ndarray((partitions, {k}), dtype=nl.uint32, buffer=nl.sbuf)
    nisa.dma_copy(dst=src, src=a)
    nisa.memset(dst=val, value={sentinel_value})
    nisa.memset(dst=idx, value={sentinel_index})
    nisa.topk(val_dst=val, idx_dst=idx, src=src, n={n}{sorted})  # ERR
    nisa.dma_copy(dst=values, src=val)
    nisa.dma_copy(dst=indices, src=idx)
    return values, indices
"""


def kernel(n: int, k: int, sorted_: bool | None = None, src_dtype: str = "nl.bfloat16") -> str:
    flag = "" if sorted_ is None else f", sorted={sorted_}"
    return KERNEL.format(n=n, k=k, sorted=flag, src_dtype=src_dtype, sentinel_value=SENTINEL_VALUE,
                         sentinel_index=SENTINEL_INDEX)


def bf16(values: np.ndarray) -> np.ndarray:
    return values.astype(ml_dtypes.bfloat16)


def expected_top(a: np.ndarray, n: int, k: int, ranked: bool) -> tuple[np.ndarray, np.ndarray]:
    """Per group, the snake positions of the k largest of its first n elements (equal values: the lower position
    first) and their values, as [groups, k]: by rank when `ranked`, else by position."""
    groups = a.shape[0] // GROUP
    values = np.empty((groups, k), np.float32)
    positions = np.empty((groups, k), np.int64)
    for g in range(groups):
        snake = [float(a[g * GROUP + e % GROUP, e // GROUP]) for e in range(n)]
        chosen = sorted(range(n), key=lambda e, s=snake: (-s[e], e))[:k]
        if not ranked:
            chosen = sorted(chosen)
        positions[g] = chosen
        values[g] = [snake[e] for e in chosen]
    return values, positions


def results_of(out: np.ndarray, k: int) -> np.ndarray:
    """The [groups, k] results of a val_dst / idx_dst in snake layout: result j at partition j % 16, column j // 16."""
    groups = out.shape[0] // GROUP
    return np.array([[out[g * GROUP + j % GROUP, j // GROUP] for j in range(k)] for g in range(groups)])


@pytest.mark.parametrize("ranked", [True, False], ids=["sorted", "unsorted"])
def test_each_group_of_16_partitions_finds_its_k_largest_in_snake_layout(run, rng, ranked: bool) -> None:
    a = bf16(rng.standard_normal((128, 6)))
    n, k = 70, 20  # a snake shorter than src (96 slots), k not a multiple of 16
    both = run(kernel(n, k, ranked), a, hardware="trn2")
    values, indices = both.outputs
    want_values, want_positions = expected_top(a, n, k, ranked)
    np.testing.assert_array_equal(results_of(indices, k), want_positions)
    np.testing.assert_array_equal(results_of(values.astype(np.float32), k), want_values)


def test_the_order_is_open_without_sorted_and_by_rank_with_it(run, rng) -> None:
    a = bf16(rng.standard_normal((16, 4)))
    unsorted, ranked = (results_of(run(kernel(64, 16, flag), a, hardware="trn2").outputs[1], 16)
                        for flag in (None, True))
    assert sorted(unsorted[0]) == sorted(ranked[0]) and list(unsorted[0]) == sorted(unsorted[0])
    snake = a.astype(np.float32).T.reshape(-1)
    assert list(snake[ranked[0]]) == sorted(snake[ranked[0]], reverse=True)


def test_only_the_first_columns_are_written_and_the_last_one_whole(run, rng) -> None:
    # k = 20: results fill column 0 and partitions 0-3 of column 1; the rest of column 1 is written with
    # unspecified values (here NaN and the all-ones index), columns 2-19 keep what the kernel put there
    a = bf16(rng.standard_normal((32, 6)))
    values, indices = run(kernel(90, 20, True), a, hardware="trn2").outputs
    for g in range(2):
        rows = slice(g * GROUP + 4, (g + 1) * GROUP)
        assert np.isnan(values[rows, 1].astype(np.float32)).all()
        assert (indices[rows, 1] == np.iinfo(np.uint32).max).all()
    assert (values[:, 2:].astype(np.float32) == SENTINEL_VALUE).all() and (indices[:, 2:] == SENTINEL_INDEX).all()


@pytest.mark.parametrize("ranked", [True, False], ids=["sorted", "unsorted"])
def test_equal_values_keep_the_lower_positions_and_elements_past_n_never_count(run, ranked: bool) -> None:
    # four distinct values over 64 elements: the k = 24 largest cut through a run of equal ones; the
    # slots past n = 50 hold the largest value of all and must not be chosen
    a = np.tile(np.array([[3.0], [1.0], [2.0], [0.0]], np.float32), (4, 4))
    a[:, 3] = 100.0
    a[2:, 3] = 100.0  # slots 50-63 (partitions 2-15 of column 3)
    a[:2, 3] = [3.0, 1.0]  # slots 48, 49 are real elements
    a = bf16(a)
    n, k = 50, 24
    values, indices = run(kernel(n, k, ranked), a, hardware="trn2").outputs
    want_values, want_positions = expected_top(a, n, k, ranked)
    np.testing.assert_array_equal(results_of(indices, k), want_positions)
    np.testing.assert_array_equal(results_of(values.astype(np.float32), k), want_values)
    assert (results_of(indices, k) < n).all()


def test_the_largest_and_smallest_bf16_values_and_infinities_rank_by_value(run) -> None:
    largest = float(ml_dtypes.finfo(ml_dtypes.bfloat16).max)
    special = [np.inf, -np.inf, largest, -largest, 0.0, -0.5, 1.0, 2.0]
    a = bf16(np.array(special * 2, np.float32).reshape(GROUP, 1))
    values = run(kernel(16, 16, True), a, hardware="trn2").outputs[0]
    ranked = results_of(values.astype(np.float32), 16)[0]
    np.testing.assert_array_equal(ranked, sorted(special * 2, reverse=True))


def test_a_nan_input_ranks_first_so_garbage_shows(run) -> None:
    a = np.arange(16, dtype=np.float32).reshape(GROUP, 1)
    a[5, 0] = np.nan
    values, indices = run(kernel(16, 1, True), bf16(a), hardware="trn2").outputs
    assert np.isnan(float(values[0, 0])) and indices[0, 0] == 5


def test_the_model_prices_the_documented_4n_plus_k_gpsimd_cycles(run, rng) -> None:
    both = run(kernel(70, 20, True), bf16(rng.standard_normal((128, 6))), hardware="trn2")
    (inst,) = [i for i in both.instructions if i.op == "topk"]
    hardware = load_hardware("trn2")
    gpsimd = hardware.compute_engine("gpsimd")
    occupancy = CostModel(hardware).occupancy(inst)
    assert inst.engine == "gpsimd" and [w.dtype for w in inst.writes] == ["bfloat16", "uint32"]
    assert occupancy == pytest.approx((4 * 70 + 20 + gpsimd.static_overhead_cycles) / gpsimd.clock_hz)


@pytest.mark.parametrize(("shape", "n", "k", "sorted_", "src_dtype", "error", "message"), [
    ((128, 4), 7, 4, None, "nl.bfloat16", HardwareRuleError, "8 <= n < 65536"),
    ((16, 4096), 65536, 4, None, "nl.bfloat16", HardwareRuleError, "8 <= n < 65536"),
    ((16, 1), 16, 17, None, "nl.bfloat16", HardwareRuleError, "at most n=16"),
    ((16, 4), 65, 4, None, "nl.bfloat16", HardwareRuleError, "needs 5 columns of src"),
    ((24, 4), 16, 4, None, "nl.bfloat16", HardwareRuleError, "groups of 16 partitions"),
    ((16, 4), 16, 4, None, "nl.float32", HardwareRuleError, "must be bfloat16"),
])
def test_the_documented_limits_are_hardware_rules(fails, shape, n, k, sorted_, src_dtype, error, message) -> None:
    a = np.zeros(shape, np.float32 if src_dtype == "nl.float32" else ml_dtypes.bfloat16)
    err = fails(kernel(n, k, sorted_, src_dtype), a, error=error, hardware="trn2")
    assert message in err.message


def test_k_may_reach_32767_and_no_further(fails) -> None:
    err = fails(kernel(65535, 32768), np.zeros((16, 4096), ml_dtypes.bfloat16), error=HardwareRuleError,
                hardware="trn2")
    assert "1 <= k < 32768" in err.message


def test_topk_is_a_neuroncore_v3_instruction(fails) -> None:
    err = fails(kernel(16, 4), np.zeros((16, 1), ml_dtypes.bfloat16), error=HardwareRuleError, hardware="trn1")
    assert "NeuronCore-v3 and later" in err.message


def test_n_must_be_a_python_int(fails) -> None:
    err = fails(kernel("16.0", 4), np.zeros((16, 1), ml_dtypes.bfloat16), error=KernelUsageError, hardware="trn2")
    assert "n must be an int" in err.message


def test_val_dst_may_be_a_view_of_a_wider_tile(run, rng) -> None:
    # the public top-k kernels pass val_snake[:, nl.ds(0, k)] of a [P, k_pad] tile: k is the view's columns
    source = kernel(70, 20, True).replace("(partitions, 20)", "(partitions, 32)").replace(
        "val_dst=val, idx_dst=idx", "val_dst=val[:, nl.ds(0, 20)], idx_dst=idx[:, nl.ds(0, 20)]")
    a = bf16(rng.standard_normal((32, 6)))
    values, indices = run(source, a, hardware="trn2").outputs
    want_values, want_positions = expected_top(a, 70, 20, True)
    assert values.shape == (32, 32) and (indices[:, 2:] == SENTINEL_INDEX).all()
    np.testing.assert_array_equal(results_of(indices, 20), want_positions)
    np.testing.assert_array_equal(results_of(values.astype(np.float32), 20), want_values)
