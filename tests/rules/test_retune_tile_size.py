"""retune_tile_size: proposes only tile sizes that divide every dimension at every task size and
fit the hardware; a larger tile for a DMA-bound kernel speeds it up with the same numbers."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest
from rule_eval import assert_same, profile

from accelopt_core.agents.rules import RuleError
from accelopt_core.agents.rules.tile_size import RetuneTileSize

RULE = RetuneTileSize()
FULL, SMALL = (1024, 6144), (256, 1024)

COPY = textwrap.dedent('''
    import neuronxcc.nki as nki
    import neuronxcc.nki.language as nl

    TILE = 512  # columns per tile


    @nki.jit
    def kernel(x):
        rows, cols = x.shape
        out = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.shared_hbm)
        for r in nl.affine_range(rows // 128):
            for c in nl.affine_range(cols // TILE):
                t = nl.load(x[r * 128:(r + 1) * 128, c * TILE:(c + 1) * TILE])
                nl.store(out[r * 128:(r + 1) * 128, c * TILE:(c + 1) * TILE], value=nl.exp(t))
        return out
''')

MATMUL_ONLY = textwrap.dedent('''
    import neuronxcc.nki as nki
    import neuronxcc.nki.isa as nisa
    import neuronxcc.nki.language as nl


    @nki.jit
    def kernel(a, b):
        k_size, m_size = a.shape
        _, n_size = b.shape
        tile_n = nl.tile_size.gemm_moving_fmax  # one PSUM bank
        out = nl.ndarray((m_size, n_size), dtype=a.dtype, buffer=nl.shared_hbm)
        a_t = nl.load(a[0:k_size, 0:m_size])
        for n in nl.affine_range(n_size // tile_n):
            b_t = nl.load(b[0:k_size, n * tile_n:(n + 1) * tile_n])
            res = nl.copy(nisa.nc_matmul(a_t, b_t))
            nl.store(out[0:m_size, n * tile_n:(n + 1) * tile_n], value=res)
        return out
''')

LITERAL = textwrap.dedent('''
    import neuronxcc.nki as nki
    import neuronxcc.nki.language as nl


    @nki.jit
    def kernel(a, b):
        rows, cols = a.shape
        out = nl.ndarray((rows, cols), dtype=a.dtype, buffer=nl.shared_hbm)
        for r in nl.affine_range(rows // 128):
            for c in nl.affine_range(cols // 256):  # 1 KiB per partition per DMA
                x = nl.load(a[r * 128:(r + 1) * 128, c * 256:(c + 1) * 256])
                y = nl.load(b[r * 128:(r + 1) * 128, c * 256:(c + 1) * 256])
                s = nl.multiply(x, 0.5)
                t = nl.add(s, y)
                u = nl.exp(t)
                nl.store(out[r * 128:(r + 1) * 128, c * 256:(c + 1) * 256], value=u)
        return out
''')
LITERAL_SHAPES = [(1024, 2048), (1024, 2048)]


def test_larger_tiles_for_a_dma_bound_kernel(tmp_path):
    prof = profile(COPY, [FULL], tmp_path, checked=[SMALL])
    assert prof.bottleneck == "dma"
    plans = RULE.plan(COPY, prof)
    values = [p.params["new"] for p in plans]
    assert values[0] == 1024  # 4 KiB per partition first (fact sheet A.6)
    assert all(FULL[1] % v == 0 and SMALL[1] % v == 0 for v in values)  # 1536 would drop columns
    new = RULE.apply(COPY, plans[0])
    assert "TILE = 1024  # columns per tile" in new
    rng = np.random.default_rng(5)
    assert_same(COPY, new, [rng.standard_normal((256, 2048), dtype=np.float32)], tmp_path)
    assert profile(new, [FULL], tmp_path).latency_ms < prof.latency_ms


def test_min_expressions_are_tile_sizes_too(tmp_path):
    source = COPY.replace("TILE = 512  # columns per tile\n", "").replace(
        "rows, cols = x.shape\n", "rows, cols = x.shape\n    TILE = min(cols, 512)\n")
    plans = RULE.plan(source, profile(source, [FULL], tmp_path, checked=[SMALL]))
    assert plans and "TILE = min(cols, 1024)" in RULE.apply(source, plans[0])


def test_matmul_limits_and_unknown_shapes_give_no_plan(tmp_path):
    prof = profile(MATMUL_ONLY, [(128, 128), (128, 2048)], tmp_path)
    assert RULE.plan(MATMUL_ONLY, prof) == []  # 512 is the moving-operand maximum already
    assert RULE.plan(COPY, None) == []  # no sizes: no way to show a value divides the dimensions
    unsized = profile(COPY, [FULL], tmp_path)
    unsized.input_shapes = {}
    assert RULE.plan(COPY, unsized) == []


def test_apply_refuses_a_changed_constant(tmp_path):
    plan = RULE.plan(COPY, profile(COPY, [FULL], tmp_path, checked=[SMALL]))[0]
    with pytest.raises(RuleError):
        RULE.apply(COPY.replace("TILE = 512", "TILE = 256"), plan)


def test_integer_literal_tile_sizes(tmp_path):
    prof = profile(LITERAL, LITERAL_SHAPES, tmp_path)
    plans = RULE.plan(LITERAL, prof)
    assert sorted(p.params["new"] for p in plans) == [512, 1024, 2048]  # divide 2048; 128 is the partition max
    assert plans[0].params["new"] == 1024 and plans[0].line == 11
    assert plans[0].description.startswith("line 11: the free-axis tile size 256 (a literal) = 1024 instead of 256")
    new = RULE.apply(LITERAL, plans[0])
    assert "cols // 1024):  # 1 KiB per partition per DMA" in new and " 256" not in new and "r * 128:" in new
    rng = np.random.default_rng(7)
    arrays = [rng.standard_normal((256, 2048), dtype=np.float32) for _ in range(2)]
    assert_same(LITERAL, new, arrays, tmp_path)
    assert profile(new, LITERAL_SHAPES, tmp_path).latency_ms < prof.latency_ms
    with pytest.raises(RuleError):  # the literal gained a use that is not a tile size
        RULE.apply(LITERAL.replace("nl.multiply(x, 0.5)", "nl.multiply(x, 256)"), plans[0])


def test_literal_with_another_use_is_not_a_tile_size(tmp_path):
    source = LITERAL.replace("nl.multiply(x, 0.5)", "nl.multiply(x, 256)")
    assert RULE.plan(source, profile(source, LITERAL_SHAPES, tmp_path)) == []


STEPPED = textwrap.dedent('''
    import neuronxcc.nki as nki
    import neuronxcc.nki.language as nl

    TILE_S = 256  # columns per step


    @nki.jit
    def kernel(x):
        rows, cols = x.shape
        out = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.shared_hbm)
        for r in nl.affine_range(rows // 128):
            for s in range(0, cols, TILE_S):
                t = nl.load(x[r * 128:(r + 1) * 128, nl.ds(s, TILE_S)])
                nl.store(out[r * 128:(r + 1) * 128, nl.ds(s, TILE_S)], value=nl.exp(t))
        return out
''')


@pytest.mark.parametrize("form", ["module constant", "literal step", "parameter default", "local constant"])
def test_stepped_range_loops_are_tiled_by_their_step(tmp_path, form):
    """`range(0, D, T)` tiles D by its step as `range(D // T)` does (public kernels write both), whether T
    is a module constant, a literal, a kernel parameter's default or a local constant."""
    source = {
        "module constant": STEPPED,
        "literal step": STEPPED.replace("TILE_S = 256  # columns per step\n", "").replace("TILE_S", "256"),
        "parameter default": STEPPED.replace("TILE_S = 256  # columns per step\n", "").replace(
            "def kernel(x):", "def kernel(x, TILE_S=256):"),
        "local constant": STEPPED.replace("TILE_S = 256  # columns per step\n", "").replace(
            "rows, cols = x.shape\n", "rows, cols = x.shape\n    TILE_S = 256\n"),
    }[form]
    prof = profile(source, [FULL], tmp_path, checked=[SMALL])
    plans = RULE.plan(source, prof)
    values = [p.params["new"] for p in plans]
    assert values and values[0] == 1024
    assert all(FULL[1] % v == 0 and SMALL[1] % v == 0 for v in values)
    new = RULE.apply(source, plans[0])
    assert "1024" in new and "256" not in new
    rng = np.random.default_rng(3)
    assert_same(source, new, [rng.standard_normal((256, 1024), dtype=np.float32)], tmp_path)
    assert profile(new, [FULL], tmp_path).latency_ms < prof.latency_ms


def test_a_stepped_loop_from_an_offset_tiles_what_is_left(tmp_path):
    """`range(64, D, T)` covers D - 64 columns: a step must divide that, not D."""
    source = STEPPED.replace("range(0, cols, TILE_S)", "range(128, cols, TILE_S)")
    plans = RULE.plan(source, profile(source, [(1024, 2176)], tmp_path))
    assert plans and all((2176 - 128) % p.params["new"] == 0 for p in plans)


BLOCKS = textwrap.dedent('''
    import neuronxcc.nki as nki
    import neuronxcc.nki.language as nl

    BLOCK = 256  # columns per block
    BLOCKS = 4  # blocks per row of tiles: BLOCKS * BLOCK columns


    @nki.jit
    def kernel(x):
        rows, cols = x.shape
        out = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.shared_hbm)
        for r in nl.affine_range(rows // 128):
            for b in nl.affine_range(BLOCKS):
                t = nl.load(x[r * 128:(r + 1) * 128, b * BLOCK:(b + 1) * BLOCK])
                nl.store(out[r * 128:(r + 1) * 128, b * BLOCK:(b + 1) * BLOCK], value=nl.exp(t))
        return out
''')


def test_a_block_size_and_its_trip_count_change_together(tmp_path):
    before = profile(BLOCKS, [(512, 1024)], tmp_path)
    plans = RULE.plan(BLOCKS, before)
    assert plans and all(p.params["trips"] == "BLOCKS" and p.params["new"] * p.params["trips_new"] == 1024
                         for p in plans)  # never the block alone: the loop covers the same 1024 columns
    assert plans[0].priority >= plans[-1].priority  # ranked by the profile's DMA time
    new = RULE.apply(BLOCKS, plans[0])
    assert f"BLOCK = {plans[0].params['new']}" in new and f"BLOCKS = {plans[0].params['trips_new']}" in new
    assert_same(BLOCKS, new, [np.random.default_rng(2).standard_normal((512, 1024), dtype=np.float32)], tmp_path)
    assert profile(new, [(512, 1024)], tmp_path).latency_ms < before.latency_ms


def test_a_trip_count_with_another_use_keeps_the_block_alone(tmp_path):
    other = BLOCKS.replace("return out", "assert BLOCKS > 0\n    return out")
    assert all("trips" not in p.params for p in RULE.plan(other, profile(other, [(512, 1024)], tmp_path)))
