"""Instructions and language functions the public samples use beyond the basics: each checked against
NumPy in both modes (the `run` fixture compares the numeric and the trace-only trace) and priced by the
performance model from its ISA cost formula."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from accelopt_core.hardware import load_hardware
from accelopt_core.nki import HardwareRuleError, run_kernel
from accelopt_core.perfmodel.costs import CostModel

HEADER = """
import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
"""


def priced(both, hardware: str = "trn1") -> CostModel:
    """Every instruction of the run has an ISA cost formula (none falls back to the generic one)."""
    costs = CostModel(load_hardware(hardware))
    for inst in both.traced.trace.instructions:
        costs.dma(inst) if inst.engine == "dma" else costs.occupancy(inst)
    assert not costs.unknown_ops, costs.unknown_ops
    return costs


def test_tensor_scalar_reduce(run, rng):
    a = rng.standard_normal((128, 300)).astype(np.float32)
    both = run(HEADER + """
@nki.jit
def kernel(a):
    out = nl.ndarray((128, 301), dtype=a.dtype, buffer=nl.shared_hbm)
    top = nl.ndarray((128, 1), dtype=nl.float32)
    scaled = nisa.tensor_scalar_reduce(data=nl.load(a), op0=nl.multiply, operand0=0.5, reduce_op=nl.max,
                                       reduce_res=top)
    nl.store(out[:, 0:300], value=scaled)
    nl.store(out[:, 300:301], value=top)
    return out
""", a)
    np.testing.assert_allclose(both.out[:, :300], 0.5 * a, rtol=1e-6)
    np.testing.assert_allclose(both.out[:, 300], 0.5 * a.max(axis=1), rtol=1e-6)
    inst = next(i for i in both.instructions if i.op == "tensor_scalar_reduce")
    assert inst.engine == "vector" and len(inst.writes) == 2
    spec = load_hardware("trn1").compute_engine("vector")
    # max(MIN_II, N) + MIN_II (ISA cost table)
    # max(MIN_II, N) + MIN_II, plus the static overhead every instruction occupies its engine with (trn1.toml)
    assert priced(both).occupancy(inst) == pytest.approx(
        (300 + spec.min_ii_cycles + spec.static_overhead_cycles) / spec.clock_hz)


def test_bn_stats_and_bn_aggr_give_mean_and_variance_also_under_a_mask(run, rng):
    x = rng.standard_normal((128, 700)).astype(np.float32)
    both = run(HEADER + """
@nki.jit
def kernel(x):
    out = nl.ndarray((128, 2), dtype=nl.float32, buffer=nl.shared_hbm)
    tile = nl.load(x)
    stats = nl.ndarray((128, 12), dtype=nl.float32)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(512)[None, :]
    for j in nl.affine_range(2):
        stats[i_p, j * 6 + nl.arange(6)[None, :]] = nisa.bn_stats(tile[i_p, j * 512 + i_f],
                                                                  mask=(j * 512 + i_f < 700), dtype=nl.float32)
    nl.store(out, value=nisa.bn_aggr(stats))
    return out
""", x)
    np.testing.assert_allclose(both.out[:, 0], x.mean(axis=1), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(both.out[:, 1], x.var(axis=1), rtol=1e-4)
    priced(both)


def test_bn_stats_reads_at_most_512_elements(fails):
    err = fails(HEADER + """
@nki.jit
def kernel(x):
    s = nisa.bn_stats(nl.load(x))  # ERR
    return x
""", np.zeros((128, 600), np.float32), error=HardwareRuleError)
    assert "at most 512 elements" in err.message


def test_tensor_partition_reduce(run, rng):
    a = rng.standard_normal((64, 32)).astype(np.float32)
    both = run(HEADER + """
@nki.jit
def kernel(a):
    out = nl.ndarray((1, 32), dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nisa.tensor_partition_reduce(np.add, nl.load(a)))
    return out
""", a)
    np.testing.assert_allclose(both.out[0], a.sum(axis=0), rtol=1e-5)
    assert [i.engine for i in both.instructions if i.op == "tensor_partition_reduce"] == ["gpsimd"]
    priced(both)


def test_loop_reduce_combines_into_its_destination(run, rng):
    a = rng.standard_normal((3, 128, 64)).astype(np.float32)
    both = run(HEADER + """
@nki.jit
def kernel(a):
    out = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.shared_hbm)
    acc = nl.zeros((128, 64), dtype=nl.float32)
    for k in nl.affine_range(3):
        acc[...] = nl.loop_reduce(nl.load(a[k]), op=np.add, loop_indices=[k], dtype=nl.float32)
    nl.store(out, value=acc)
    return out
""", a)
    np.testing.assert_allclose(both.out, a.sum(axis=0), rtol=1e-5)
    adds = [i for i in both.instructions if i.op == "tensor_tensor"]
    assert len(adds) == 3 and all(i.writes[0].tensor == adds[0].writes[0].tensor for i in adds)


def test_dropout_is_seeded_and_keeps_or_zeroes_elements(run, rng):
    a = rng.uniform(1.0, 2.0, (128, 256)).astype(np.float32)
    source = HEADER + """
@nki.jit
def kernel(a, seed):
    out = nl.ndarray((2, 128, 256), dtype=a.dtype, buffer=nl.shared_hbm)
    nl.random_seed(seed=nl.load(seed))
    x = nl.load(a)
    nl.store(out[0], value=nl.dropout(x, rate=0.25))
    nl.store(out[1], value=nisa.dropout(x, prob=1.0))
    return out
"""
    both = run(source, a, np.full((1, 1), 7, np.int32))
    kept = both.out[0] != 0
    np.testing.assert_array_equal(both.out[0][kept], a[kept])
    assert 0.65 < kept.mean() < 0.85 and not both.out[1].any()
    again = run(source, a, np.full((1, 1), 7, np.int32))
    np.testing.assert_array_equal(again.out, both.out)  # the same seed draws the same elements
    priced(both)


def test_type_limits_and_the_core_generation(run):
    both = run(HEADER + """
@nki.jit
def kernel(a):
    out = nl.ndarray((1, 4), dtype=nl.float32, buffer=nl.shared_hbm)
    values = (nl.finfo(nl.bfloat16).max, nl.fp32.min, float(nisa.get_nc_version()),
              float(nisa.get_nc_version() >= nisa.nc_version.gen3))
    for i, value in enumerate(values):
        nl.store(out[0:1, i:i + 1], value=nl.full((1, 1), value, dtype=nl.float32))
    return out
""", np.zeros((1, 1), np.float32))
    expected = [float(ml_dtypes.finfo(ml_dtypes.bfloat16).max), float(np.finfo(np.float32).min), 2.0, 0.0]
    np.testing.assert_array_equal(both.out[0], np.array(expected, np.float32))
    trn2 = run_kernel(both.kernel, [np.zeros((1, 1), np.float32)], hardware="trn2")
    assert trn2.outputs[0][0, 2:].tolist() == [3.0, 1.0]


def test_legacy_dma_copy_and_dma_transpose(run, rng):
    a = rng.standard_normal((16, 8, 4)).astype(np.float32)
    both = run(HEADER + """
@nki.jit
def kernel(a):
    out = nl.ndarray((4, 8, 16), dtype=a.dtype, buffer=nl.shared_hbm)
    flat = nl.ndarray((16, 8, 4), dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(src=a, dst=flat)
    nl.store(out, value=nisa.dma_transpose(flat))
    return out
""", a)
    np.testing.assert_array_equal(both.out, a.transpose(2, 1, 0))
    dmas = [i for i in both.instructions if i.op == "dma_copy"]
    assert [i.attrs["transpose"] for i in dmas] == [False, True, False]
    priced(both)


def test_indirect_dma_gathers_and_scatters_rows(run, rng):
    table = rng.standard_normal((200, 32)).astype(np.float32)
    rows = rng.integers(0, 200, (128, 1)).astype(np.int32)
    rows[100:] = 999  # garbage where the mask switches the rows off
    both = run(HEADER + """
@nki.jit
def kernel(table, rows):
    out = nl.ndarray((2, 200, 32), dtype=table.dtype, buffer=nl.shared_hbm)
    index = nl.load(rows)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(32)[None, :]
    gathered = nl.load(table[index, i_f], mask=(i_p < 100))
    nl.store(out[0, i_p, i_f], value=gathered, mask=(i_p < 100))
    nl.store(out[1, index, i_f], value=nl.multiply(gathered, 2.0), mask=(i_p < 50))
    return out
""", table, rows)
    np.testing.assert_array_equal(both.out[0, :100], table[rows[:100, 0]])
    scattered = {int(r): 2 * table[r] for r in rows[:50, 0]}
    for row, value in scattered.items():
        np.testing.assert_array_equal(both.out[1, row], value)
    gather = next(i for i in both.instructions if i.op == "dma_copy" and i.attrs["indirect"])
    assert len(gather.reads) == 2 and gather.reads[0].region == ((0, 200), (0, 32))  # the table, the index tile
    priced(both)


def test_indirect_indices_are_read_when_the_dma_runs(run, rng):
    """The DMA engine reads the index tile when it moves the data: an index tile rewritten after the
    subscript was written but before the DMA addresses the rows it holds then."""
    table = rng.standard_normal((200, 32)).astype(np.float32)
    rows = rng.integers(0, 100, (128, 1)).astype(np.int32)
    both = run(HEADER + """
@nki.jit
def kernel(table, rows):
    out = nl.ndarray((128, 32), dtype=table.dtype, buffer=nl.shared_hbm)
    index = nl.load(rows)
    gather = table[index, nl.arange(32)[None, :]]
    index[...] = nl.add(index, 100)
    nl.store(out, value=nl.load(gather))
    return out
""", table, rows)
    np.testing.assert_array_equal(both.out, table[rows[:, 0] + 100])


def test_an_active_indirect_index_out_of_bounds_is_an_error(load, rng):
    _, kernel, _ = load(HEADER + """
@nki.jit
def kernel(table, rows):
    out = nl.ndarray((128, 32), dtype=table.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.load(table[nl.load(rows), nl.arange(32)[None, :]]))
    return out
""")
    rows = np.full((128, 1), 250, np.int32)
    with pytest.raises(HardwareRuleError, match=r"indirect index 250 .* out of bounds"):
        run_kernel(kernel, [np.zeros((200, 32), np.float32), rows])


def test_double_row_matmul_contracts_both_rows_at_twice_the_rate(run, rng):
    s = rng.uniform(-2, 2, (128, 2, 128)).astype(ml_dtypes.float8_e4m3)
    m = rng.uniform(-2, 2, (128, 2, 512)).astype(ml_dtypes.float8_e4m3)
    source = HEADER + """
@nki.jit
def kernel(s, m):
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    r = nisa.nc_matmul(nl.load(s), nl.load(m), perf_mode="double_row_gen3")
    nl.store(out, value=nl.copy(r))
    return out
"""
    both = run(source, s, m, hardware="trn2")
    expected = np.einsum("krm,krn->mn", s.astype(np.float32), m.astype(np.float32))
    np.testing.assert_allclose(both.out, expected, rtol=1e-5, atol=1e-3)
    mm = next(i for i in both.instructions if i.op == "nc_matmul")
    assert mm.flops == 2 * 256 * 128 * 512 and mm.attrs["perf_mode"] == "double_row"
    costs = priced(both, "trn2")
    spec = load_hardware("trn2").tensor
    assert costs.occupancy(mm) == pytest.approx(512 * spec.factor("float8_e4m3") / spec.clock_hz)


@pytest.mark.parametrize(("hardware", "dtype", "message"), [
    ("trn1", ml_dtypes.float8_e4m3, "needs NeuronCore-v3"),
    ("trn2", np.float32, "takes FP8"),
])
def test_double_row_matmul_rules(fails, hardware, dtype, message):
    err = fails(HEADER + """
@nki.jit
def kernel(s, m):
    r = nisa.nc_matmul(nl.load(s), nl.load(m), perf_mode="double_row")  # ERR
    return s
""", np.zeros((128, 2, 64), dtype), np.zeros((128, 2, 512), dtype), hardware=hardware, error=HardwareRuleError)
    assert message in err.message


def test_transposed_operands_left_in_psum_are_staged_through_sbuf(run, rng):
    x = rng.standard_normal((128, 128)).astype(np.float32)
    y = rng.standard_normal((128, 128)).astype(np.float32)
    both = run(HEADER + """
@nki.jit
def kernel(x, y):
    out = nl.ndarray((2, 128, 128), dtype=x.dtype, buffer=nl.shared_hbm)
    xs, ys = nl.load(x), nl.load(y)
    nl.store(out[0], value=nl.copy(nl.matmul(xs, nl.transpose(ys), transpose_x=True)))
    nl.store(out[1], value=nl.copy(nisa.nc_matmul(nisa.nc_transpose(xs), ys)))
    return out
""", x, y)
    np.testing.assert_allclose(both.out[0], x.T @ y.T, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(both.out[1], x @ y, rtol=1e-4, atol=1e-4)
    ops = [i.op for i in both.instructions]
    assert ops.count("tensor_copy") == 4  # two inserted PSUM -> SBUF copies, two result copies


def test_affine_select_on_a_psum_tile_goes_through_sbuf(run, rng):
    s = rng.standard_normal((128, 128)).astype(np.float32)
    both = run(HEADER + """
@nki.jit
def kernel(s):
    out = nl.ndarray((128, 128), dtype=s.dtype, buffer=nl.shared_hbm)
    scores = nisa.nc_matmul(nl.load(s), nl.load(s))
    i_p, i_f = nl.mgrid[0:128, 0:128]
    nl.store(out, value=nisa.affine_select(pred=(i_p >= i_f), on_true_tile=scores, on_false_value=-9984.0))
    return out
""", s)
    np.testing.assert_allclose(both.out, np.where(np.tri(128, dtype=bool), s.T @ s, -9984.0), rtol=1e-4, atol=1e-3)
    select = next(i for i in both.instructions if i.op == "affine_select")
    assert select.engine == "gpsimd" and all(a.buffer == "sbuf" for a in select.reads)


def test_masks_decided_at_trace_time(run, rng):
    a = rng.standard_normal((128, 8)).astype(np.float32)
    both = run(HEADER + """
@nki.jit
def kernel(a):
    out = nl.ndarray((2, 128, 8), dtype=a.dtype, buffer=nl.shared_hbm)
    x = nl.load(a)
    i_f = nl.arange(8)[None, :]
    for i in nl.affine_range(2):
        nl.store(out[i], value=nl.zeros((128, 8), dtype=a.dtype))
        nl.store(out[i], value=x, mask=(i * 128 < 100) & (i_f < 8))
    return out
""", a)
    np.testing.assert_array_equal(both.out[0], a)
    np.testing.assert_array_equal(both.out[1], 0)


def test_iota_of_mgrid_components_spans_the_whole_grid(run):
    both = run(HEADER + """
@nki.jit
def kernel(a):
    out = nl.ndarray((4, 5, 3, 3), dtype=nl.int32, buffer=nl.shared_hbm)
    g = nl.mgrid[0:4, 0:5, 0:3, 0:3]
    nl.store(out, value=nisa.iota(3 * g.y + g.z, dtype=nl.int32))
    return out
""", np.zeros((1, 1), np.float32))
    np.testing.assert_array_equal(both.out, np.broadcast_to(np.arange(9).reshape(3, 3), (4, 5, 3, 3)))


def test_a_column_of_an_on_chip_tile_indexes_like_its_memory(run, rng):
    a = rng.standard_normal((128, 4)).astype(np.float32)
    both = run(HEADER + """
@nki.jit
def kernel(a):
    out = nl.ndarray((128, 1), dtype=a.dtype, buffer=nl.shared_hbm)
    column = nl.load(a)[:, 2]      # a [128] tile
    nl.store(out, value=nl.exp(column[:, 0]))
    return out
""", a)
    np.testing.assert_allclose(both.out[:, 0], np.exp(a[:, 2]), rtol=1e-6)


def test_matmul_accumulating_onto_unwritten_psum_starts_a_group(run, rng):
    s = rng.standard_normal((2, 128, 64)).astype(np.float32)
    m = rng.standard_normal((2, 128, 32)).astype(np.float32)
    both = run(HEADER + """
@nki.jit
def kernel(s, m):
    out = nl.ndarray((64, 32), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.ndarray((64, 32), dtype=nl.float32, buffer=nl.psum)   # never initialised
    for k in nl.affine_range(2):
        acc += nisa.nc_matmul(nl.load(s[k]), nl.load(m[k]))
    nl.store(out, value=nl.copy(acc))
    return out
""", s, m)
    np.testing.assert_allclose(both.out, s[0].T @ m[0] + s[1].T @ m[1], rtol=1e-4, atol=1e-4)


def test_hbm_views_take_the_shape_keyword(run, rng):
    a = rng.standard_normal((4, 6)).astype(np.float32)
    both = run(HEADER + """
@nki.jit
def kernel(a):
    out = nl.ndarray((24, 1), dtype=a.dtype, buffer=nl.shared_hbm)
    flat = a.reshape(shape=(24, 1))
    nl.store(out, value=nl.load(flat))
    return out
""", a)
    np.testing.assert_array_equal(both.out[:, 0], a.reshape(-1))


def test_loop_reduce_into_a_destination_never_written_starts_there(run, rng):
    """Compiler output reduces with nl.loop_reduce into an nl.ndarray it never filled: the first
    iteration's tile is the start of the reduction (a filled destination still takes part)."""
    a = rng.standard_normal((3, 128, 1)).astype(np.float32) - 5.0  # all negative: a zero start would show
    both = run(HEADER + """
@nki.jit
def kernel(a):
    out = nl.ndarray((2, 128, 1), dtype=a.dtype, buffer=nl.shared_hbm)
    fresh = nl.ndarray((nl.par_dim(128), 1), dtype=nl.float32, buffer=nl.sbuf)
    zero = nl.zeros((nl.par_dim(128), 1), dtype=nl.float32, buffer=nl.sbuf)
    for k in nl.affine_range(3):
        fresh[...] = nl.loop_reduce(nl.load(a[k]), op=np.max, loop_indices=[k], dtype=nl.float32)
        zero[...] = nl.loop_reduce(nl.load(a[k]), op=np.max, loop_indices=[k], dtype=nl.float32)
    nl.store(out[0], value=fresh)
    nl.store(out[1], value=zero)
    return out
""", a)
    np.testing.assert_allclose(both.out[0], a.max(axis=0), rtol=1e-6)
    np.testing.assert_allclose(both.out[1], np.maximum(a.max(axis=0), 0.0), rtol=1e-6)


def test_the_top_8_instructions_find_locate_and_replace_the_largest_values(run, rng):
    """max8 (descending), nc_find_index8 (a repeated value takes its next occurrence) and
    nc_match_replace8 (repeats taken from the last slot), the newer API as nki-library's top-k calls them."""
    x = rng.standard_normal((128, 300)).astype(np.float32)
    x[:, 10] = x[:, 20] = x[:, 30] = 9.0  # a three-way tie for the largest value
    both = run("""
import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def kernel(x):
    out = nl.ndarray((128, 8 + 8 + 8 + 300), dtype=nl.float32, buffer=nl.shared_hbm)
    data = nl.ndarray((128, 300), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=data, src=x)
    top = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf)
    nisa.max8(dst=top, src=data)
    where = nl.ndarray((128, 8), dtype=nl.uint32, buffer=nl.sbuf)
    nisa.nc_find_index8(dst=where, data=data, vals=top)
    replaced = nl.ndarray((128, 300), dtype=nl.float32, buffer=nl.sbuf)
    taken = nl.ndarray((128, 8), dtype=nl.uint32, buffer=nl.sbuf)
    nisa.nc_match_replace8(dst=replaced, data=data, vals=top, imm=-1e9, dst_idx=taken)
    as_float = nl.ndarray((128, 16), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=as_float[:, 0:8], src=where)
    nisa.tensor_copy(dst=as_float[:, 8:16], src=taken)
    nisa.dma_copy(dst=out[:, 0:8], src=top)
    nisa.dma_copy(dst=out[:, 8:24], src=as_float)
    nisa.dma_copy(dst=out[:, 24:324], src=replaced)
    return out
""", x)
    order = np.argsort(-x, axis=1, kind="stable")[:, :8]
    np.testing.assert_array_equal(both.out[:, 0:8], np.take_along_axis(x, order, axis=1))
    np.testing.assert_array_equal(both.out[:, 8:16], order)  # ties located in ascending positions
    np.testing.assert_array_equal(both.out[:, 8:11], np.tile([10, 20, 30], (128, 1)))
    np.testing.assert_array_equal(both.out[:, 16:19], np.tile([30, 20, 10], (128, 1)))  # the first to the last slot
    expected = x.copy()
    np.put_along_axis(expected, order, -1e9, axis=1)
    np.testing.assert_array_equal(both.out[:, 24:], expected)
    priced(both, "trn2")


def test_the_legacy_top_8_instructions_return_their_tiles(run, rng):
    x = rng.standard_normal((64, 40)).astype(np.float32)
    both = run(HEADER + """
@nki.jit
def kernel(x):
    out = nl.ndarray((64, 16), dtype=nl.float32, buffer=nl.shared_hbm)
    data = nl.load(x)
    top = nisa.max8(src=data)
    where = nisa.nc_find_index8(data=data, vals=top, dtype=nl.uint16)
    nl.store(out[:, 0:8], value=top)
    nl.store(out[:, 8:16], value=nl.copy(where, dtype=nl.float32))
    return out
""", x)
    order = np.argsort(-x, axis=1, kind="stable")[:, :8]
    np.testing.assert_array_equal(both.out, np.concatenate([np.take_along_axis(x, order, 1), order], axis=1))


def test_range_select_keeps_a_window_of_columns_and_reduces_it(run, rng):
    """Row p keeps columns j with low[p] <= j + 8 < high[p] (attention's sliding window), fills the rest
    with FP32's minimum, and its maximum reaches reduce_res; tensor_copy_predicated then copies where a
    predicate is set."""
    x = rng.standard_normal((128, 64)).astype(np.float32)
    bounds = np.stack([np.arange(128) % 40, np.arange(128) % 40 + 20], axis=1).astype(np.float32)
    predicate = (rng.random((128, 64)) < 0.5).astype(np.uint8)
    both = run("""
import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def kernel(x, bounds, predicate):
    sb = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=sb, src=x)
    b = nl.ndarray((128, 2), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=b, src=bounds)
    p = nl.ndarray((128, 64), dtype=nl.uint8, buffer=nl.sbuf)
    nisa.dma_copy(dst=p, src=predicate)
    kept = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    top = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.range_select(dst=kept, on_true_tile=sb, comp_op0=nl.greater_equal, comp_op1=nl.less,
                      bound0=b[:, 0:1], bound1=b[:, 1:2], reduce_res=top, range_start=8)
    picked = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=picked, value=-1.0)
    nisa.tensor_copy_predicated(dst=picked, src=sb, predicate=p)
    out = nl.ndarray((128, 129), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out[:, 0:64], src=kept)
    nisa.dma_copy(dst=out[:, 64:65], src=top)
    nisa.dma_copy(dst=out[:, 65:129], src=picked)
    return out
""", x, bounds, predicate, hardware="trn2")
    column = np.arange(64)[None, :] + 8
    window = (column >= bounds[:, :1]) & (column < bounds[:, 1:])
    kept = np.where(window, x, np.finfo(np.float32).min)
    np.testing.assert_array_equal(both.out[:, :64], kept)
    np.testing.assert_array_equal(both.out[:, 64], kept.max(axis=1))
    np.testing.assert_array_equal(both.out[:, 65:], np.where(predicate != 0, x, -1.0))
    priced(both, "trn2")


def test_range_select_is_a_neuroncore_v3_instruction(fails):
    fails("""
import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def kernel(x):
    sb = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    b = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
    kept = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    nisa.range_select(dst=kept, on_true_tile=sb, comp_op0=nl.less, comp_op1=nl.less, bound0=b, bound1=b)  # ERR
    return x
""", np.zeros((1, 1), np.float32), error=HardwareRuleError, hardware="trn1")


def test_dma_compute_adds_its_sources_on_the_way(run, rng):
    """nki-library's fused residual add: dst = x + residual + attention, summed in float32, cast once."""
    arrays = [rng.standard_normal((128, 256)).astype(ml_dtypes.bfloat16) for _ in range(3)]
    both = run("""
import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def kernel(x, residual, attention):
    total = nl.ndarray((128, 256), dtype=nl.bfloat16, buffer=nl.sbuf)
    nisa.dma_compute(dst=total, srcs=[x, residual, attention], reduce_op=nl.add)
    out = nl.ndarray((128, 256), dtype=nl.bfloat16, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=total)
    return out
""", *arrays, hardware="trn2")
    expected = sum(a.astype(np.float32) for a in arrays).astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(both.out, expected)
    costs = priced(both, "trn2")
    compute = next(i for i in both.traced.trace.instructions if (i.attrs or {}).get("compute"))
    assert costs.dma(compute).payload == 4 * 128 * 256 * 2  # three sources read, the sum written
