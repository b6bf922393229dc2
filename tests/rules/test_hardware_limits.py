"""The rules take the partition count and the PSUM banks from the hardware profile the kernel was profiled
on (not from numbers of their own): a generation with fewer partitions or banks changes what they propose."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import libcst as cst
from kernel_styles import SHAPES, source
from rule_eval import profile

from accelopt_core.agents.rules.cst_util import dtype_bytes, tile_size_constant
from accelopt_core.agents.rules.fill_partitions import FillPartitions
from accelopt_core.agents.rules.unroll_jam import JamMatmulLoops
from accelopt_core.hardware.profile import HARDWARE_DIR


def _generation(tmp_path: Path, **values: int) -> str:
    """A trn1 profile with some [memory] numbers changed, as a path `load_hardware` accepts."""
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
