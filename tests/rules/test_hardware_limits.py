"""The rules take the partition count, the PSUM banks and the DMA transfer size worth its setup from the hardware
profile the kernel was profiled on (not from numbers of their own): a generation with other numbers changes what
they propose."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import libcst as cst
from kernel_styles import SHAPES, source
from rule_eval import profile

from accelopt_core.agents.rules.cst_util import dtype_bytes, tile_size_constant
from accelopt_core.agents.rules.fill_partitions import FillPartitions
from accelopt_core.agents.rules.merge_dma import MergeDma
from accelopt_core.agents.rules.tile_size import _dma_gain
from accelopt_core.agents.rules.unroll_jam import JamMatmulLoops
from accelopt_core.hardware import load_hardware
from accelopt_core.hardware.profile import HARDWARE_DIR


def _generation(tmp_path: Path, **values: int) -> str:
    """A trn1 profile with some integer numbers changed, as a path `load_hardware` accepts."""
    text = (HARDWARE_DIR / "trn1.toml").read_text(encoding="utf-8")
    for key, value in values.items():
        text = re.sub(rf"^{key} = \d+", f"{key} = {value}", text, count=1, flags=re.M)
    path = tmp_path / "narrow.toml"
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_stacking_on_partitions_follows_the_generations_partition_count(tmp_path):
    text = source("compiler_rotary")
    measured = profile(text, SHAPES["compiler_rotary"], tmp_path)
    assert [p.params["factor"] for p in FillPartitions().plan(text, measured)] == [2]
    narrow = dataclasses.replace(measured, hardware=_generation(tmp_path, sbuf_partitions=64))
    assert FillPartitions().plan(text, narrow) == []  # 64-row tiles already fill 64 partitions


def test_jamming_accumulators_follows_the_generations_psum_banks(tmp_path):
    text = source("compiler_matmul")
    measured = profile(text, SHAPES["compiler_matmul"], tmp_path)
    assert len(JamMatmulLoops().plan(text, measured)) == 1
    few = dataclasses.replace(measured, hardware=_generation(tmp_path, psum_banks=2))
    assert JamMatmulLoops().plan(text, few) == []  # half of two banks holds one accumulator, not two


def test_dtype_sizes_and_tile_sizes_are_the_simulators():
    assert [dtype_bytes(cst.parse_expression(f"nl.{name}")) for name in ("float32", "tfloat32", "bfloat16",
                                                                         "float8_e4m3", "bool_")] == [4, 4, 2, 1, 1]
    assert dtype_bytes(cst.parse_expression('"float16"')) == 2 and dtype_bytes(cst.parse_expression("nl.foo")) is None
    assert (tile_size_constant("pmax"), tile_size_constant("gemm_moving_fmax"), tile_size_constant("nope")) == (
        128, 512, None)


# one 128 x 128 FP32 store per piece: 4 KiB per DMA engine, under trn1's 32 KiB a transfer should reach
PIECES = """
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def kernel(x):
    rows, cols = x.shape
    out = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(rows // 128):
        block = nl.load(x[m * 128:(m + 1) * 128, :])
        for n in nl.affine_range(cols // 128):
            nl.store(out[m * 128:(m + 1) * 128, n * 128:(n + 1) * 128], value=nl.exp(block[:, n * 128:(n + 1) * 128]))
    return out
"""


def test_merging_transfers_follows_the_generations_transfer_size(tmp_path):
    measured = profile(PIECES, [(256, 512)], tmp_path)
    assert len(MergeDma().plan(PIECES, measured)) == 1
    small = dataclasses.replace(measured, hardware=_generation(tmp_path, transfer_target_bytes=4096))
    assert MergeDma().plan(PIECES, small) == []  # 4 KiB per engine already pays its setup there


def test_a_larger_tile_claims_the_generations_dma_setup_it_saves():
    trn1 = load_hardware("trn1")
    no_setup = dataclasses.replace(trn1, dma=dataclasses.replace(trn1.dma, fixed_cost_s=0.0))
    assert _dma_gain(256, 1024, trn1) > _dma_gain(256, 1024, no_setup) > 0.0  # then only efficiency is gained
