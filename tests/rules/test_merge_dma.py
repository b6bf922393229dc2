"""merge_dma: small transfers of adjacent slices merge into one DMA (same numbers, lower model
latency); transfers that are already large, or that the profile does not charge, stay."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest
from rule_eval import assert_same, profile

from accelopt_core.agents.rules import RuleError
from accelopt_core.agents.rules.merge_dma import MergeDma

RULE = MergeDma()

STORES = textwrap.dedent('''
    import neuronxcc.nki as nki
    import neuronxcc.nki.language as nl


    @nki.jit
    def kernel(x):
        rows, cols = x.shape
        out = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.shared_hbm)
        for m in nl.affine_range(rows // 128):
            block = nl.load(x[m * 128:(m + 1) * 128, :])
            for n in nl.affine_range(cols // 128):
                piece = nl.exp(block[:, n * 128:(n + 1) * 128])
                # one small store per piece
                nl.store(out[m * 128:(m + 1) * 128, n * 128:(n + 1) * 128], value=piece)
        return out
''')

LOADS = textwrap.dedent('''
    import neuronxcc.nki as nki
    import neuronxcc.nki.language as nl


    @nki.jit
    def kernel(x):
        rows, cols = x.shape
        out = nl.ndarray((rows, 256), dtype=x.dtype, buffer=nl.shared_hbm)
        for m in nl.affine_range(rows // 128):
            left = nl.load(x[m * 128:(m + 1) * 128, 0:128])  # first half
            right = nl.load(x[m * 128:(m + 1) * 128, 128:256])
            nl.store(out[m * 128:(m + 1) * 128, 0:128], value=nl.exp(left))
            nl.store(out[m * 128:(m + 1) * 128, 128:256], value=nl.exp(right))
        return out
''')

LOAD_LOOP = textwrap.dedent('''
    import neuronxcc.nki as nki
    import neuronxcc.nki.language as nl


    @nki.jit
    def kernel(x):
        rows, cols = x.shape
        out = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.shared_hbm)
        for m in nl.affine_range(rows // 128):
            buf = nl.ndarray((128, cols), dtype=x.dtype, buffer=nl.sbuf)
            for j in nl.affine_range(cols // 64):
                buf[:, j * 64:(j + 1) * 64] = nl.load(x[m * 128:(m + 1) * 128, j * 64:(j + 1) * 64])
            nl.store(out[m * 128:(m + 1) * 128, :], value=nl.exp(buf))
        return out
''')

LARGE = textwrap.dedent('''
    import neuronxcc.nki as nki
    import neuronxcc.nki.language as nl


    @nki.jit
    def kernel(x):
        rows, cols = x.shape
        out = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.shared_hbm)
        for m in nl.affine_range(rows // 128):
            for n in nl.affine_range(cols // 2048):
                t = nl.load(x[m * 128:(m + 1) * 128, n * 2048:(n + 1) * 2048])
                nl.store(out[m * 128:(m + 1) * 128, n * 2048:(n + 1) * 2048], value=nl.exp(t))
        return out
''')


@pytest.mark.parametrize("source, shape, kind, constructs", [
    (STORES, (512, 1024), "store_loop", [
        "out_block = nl.ndarray((128, (cols // 128) * 128), dtype=out.dtype, buffer=nl.sbuf)",
        "out_block[:, n * 128:(n + 1) * 128] = piece",
        "nl.store(out[m * 128:(m + 1) * 128, 0:(cols // 128) * 128], value=out_block)",
        "# one small store per piece"]),
    (LOADS, (1024, 256), "loads", [
        "left_right = nl.load(x[m * 128:(m + 1) * 128, 0:256])  # first half",
        "left = left_right[:, 0:128]", "right = left_right[:, 128:256]"]),
    (LOAD_LOOP, (512, 1024), "load_loop", [
        "buf[:, 0:(cols // 64) * 64] = nl.load(x[m * 128:(m + 1) * 128, 0:(cols // 64) * 64])"]),
])
def test_small_transfers_merge(tmp_path, source, shape, kind, constructs):
    prof = profile(source, [shape], tmp_path)
    plans = [p for p in RULE.plan(source, prof) if p.params["kind"] == kind]
    assert plans and plans[0].rule == "merge_dma"
    new = RULE.apply(source, plans[0])
    for construct in constructs:
        assert construct in new, new
    rng = np.random.default_rng(11)
    assert_same(source, new, [rng.standard_normal(shape, dtype=np.float32)], tmp_path)
    after = profile(new, [shape], tmp_path)
    assert after.profile["dma_transfer_average_bytes"] > prof.profile["dma_transfer_average_bytes"]
    if kind != "loads":
        assert after.latency_ms < prof.latency_ms
    # Two loads merged into one: fewer, larger transfers (DMA busy 0.0095 -> 0.0090 ms), but both halves'
    # work now waits for the whole transfer, where the first half's could start under the second's load;
    # the model prices the lost overlap higher (0.0132 -> 0.0144 ms), so here the search keeps the original.


def test_apply_refuses_a_changed_source(tmp_path):
    plan = RULE.plan(LOADS, profile(LOADS, [(1024, 256)], tmp_path))[0]
    with pytest.raises(RuleError):
        RULE.apply(LOADS.replace("128:256]", "129:256]"), plan)


def test_large_transfers_are_left_alone(tmp_path):
    assert RULE.plan(LARGE, profile(LARGE, [(512, 4096)], tmp_path)) == []
