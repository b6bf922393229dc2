"""Each instruction is declared once (nki/instructions.py): the places that used to restate its facts read that
table and agree with it, and every declared rule is enforced on the instruction it governs, in each API that has
it. A kernel that breaks a rule stops with a hardware-rule error; the same call within the rules runs."""

from __future__ import annotations

import inspect
import re
import tomllib
from pathlib import Path

import numpy as np
import pytest

from accelopt_core.agents.rules import fuse_elementwise
from accelopt_core.agents.rules.analysis import model_of
from accelopt_core.hardware import load_hardware
from accelopt_core.nki import HardwareRuleError, UnsupportedApiError, isa, load_kernel, ops, run_kernel
from accelopt_core.nki.instructions import (
    DECLARED,
    ENGINE_MEMORIES,
    Cost,
    Engine,
    markdown_list,
    source_engines,
    with_list,
)
from accelopt_core.nki.modern import isa as modern_isa
from accelopt_core.nki.trace import Access, Instruction, LoopNest, Op
from accelopt_core.perfmodel import allocator, floor
from accelopt_core.perfmodel.costs import CostModel

ROOT = Path(__file__).resolve().parents[2]

# ------------------------------------------------------------------ the table agrees with its readers


def test_the_trace_names_exactly_the_declared_instructions() -> None:
    assert [str(op) for op in Op] == list(DECLARED)
    assert all(d.engines and set(d.engines) <= set(Engine.ALL) for d in DECLARED.values())
    assert all(set(d.cost) <= set(d.engines) for d in DECLARED.values())


def test_every_declared_instruction_is_recorded_by_the_simulator() -> None:
    source = inspect.getsource(ops)
    assert [op for op in Op if f"Op.{op.name}" not in source] == []


def test_declared_versions_are_neuron_cores_of_the_hardware_profiles() -> None:
    versions = {tomllib.loads(path.read_text())["neuron_core_version"]
                for path in (ROOT / "accelopt_core" / "hardware").glob("*.toml")}
    assert {v for d in DECLARED.values() for v in d.versions} <= versions


def test_only_dma_reaches_hbm_and_the_engines_bound_every_declaration() -> None:
    assert [op for op, d in DECLARED.items() if "hbm" in d.reads + d.writes] == [Op.DMA_COPY]
    for d in DECLARED.values():  # each declared memory is reachable by one of its engines at least
        assert set(d.writes) <= {m for e in d.engines for m in ENGINE_MEMORIES[e][1]}, d.name


@pytest.mark.parametrize(("api", "module"), [("legacy", isa), ("modern", modern_isa)])
def test_every_declared_api_name_is_a_function_of_that_api(api: str, module: object) -> None:
    declared = {name for d in DECLARED.values() for name in (d.legacy if api == "legacy" else d.modern)}
    assert all(callable(getattr(module, name)) for name in declared)
    # every instruction function the module defines itself is declared for it
    own = {name for name, fn in vars(module).items()
           if inspect.isfunction(fn) and fn.__module__ == module.__name__ and not name.startswith("_")}
    assert own - {"get_nc_version"} <= declared


def test_a_name_declared_for_the_newer_api_only_is_not_in_the_legacy_one() -> None:
    assert DECLARED[Op.TENSOR_SCALAR_CUMULATIVE].legacy == ()
    with pytest.raises(UnsupportedApiError):
        isa.tensor_scalar_cumulative  # noqa: B018


def _instruction(op: str, engine: str) -> Instruction:
    access = Access(0, "sbuf", "float32", (128, 64), ((0, 128), (0, 64)), 128 * 64 * 4, 64 * 4)
    return Instruction(0, engine, Op(op), (access,), (access,), 128, 64, 0, 1, LoopNest(()), {"op": "add"})


@pytest.mark.parametrize("op", [op for op in DECLARED if Engine.DMA not in DECLARED[op].engines])
def test_the_cost_model_prices_each_declared_engine_and_notes_the_others(op: str) -> None:
    model = CostModel(load_hardware("trn1"))
    for engine in DECLARED[op].engines:
        if engine == Engine.TENSOR:
            continue
        model.unknown_ops.clear()
        assert model.occupancy(_instruction(op, engine), engine) > 0
        noted = (engine, op) in model.unknown_ops
        priced = DECLARED[op].cost.get(engine) is not None
        assert noted != priced, (op, engine)


def test_the_rules_place_each_nisa_call_on_its_declared_engine() -> None:
    engines = source_engines()
    assert engines["nisa.iota"] == engines["nisa.affine_select"] == Engine.GPSIMD
    model = model_of('''
import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def kernel(a):
    x = nl.load(a)
    i = nisa.iota(nl.arange(64)[None, :], dtype=nl.int32)
    y = nisa.activation(op=nl.exp, data=x)
    z = nisa.dma_compute(x, [x], nl.add)
    return x
''')
    placed = {op.call: op.engine for op in model.ops if op.call}
    assert placed["nisa.iota"] == "gpsimd" and placed["nisa.activation"] == "scalar"
    assert placed["nl.load"] == placed["nisa.dma_compute"] == "dma"
    assert all(engine == engines[f"nisa.{fn}"] for fn, (engine, _) in fuse_elementwise._ISA_PASSES.items())


def test_the_performance_model_drops_repeats_of_the_declared_data_moves_only() -> None:
    moves = {op for op, d in DECLARED.items() if d.moves}
    assert allocator._MOVES == floor._COPIES == moves == {Op.DMA_COPY, Op.NC_TRANSPOSE, Op.TENSOR_COPY}


def test_the_readme_lists_the_declared_instructions() -> None:
    readme = (ROOT / "README.md").read_text()
    assert markdown_list() in readme
    assert with_list(readme) == readme, "write the list with instructions.with_list"


def test_cost_classes_are_the_formulas_costs_py_dispatches_on() -> None:
    source = inspect.getsource(CostModel)
    assert [c for c in Cost if c not in (Cost.DMA, Cost.MATMUL) and f"Cost.{c.name}" not in source] == []


# ------------------------------------------------------------------ every rule on every instruction, both APIs

MODERN = """
import numpy as np
import nki
import nki.language as nl
import nki.isa as nisa


@nki.jit
def kernel(a):
    h = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    h1 = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    h6 = nl.ndarray((128, 6), dtype=nl.float32, buffer=nl.shared_hbm)
    hu = nl.ndarray((128, 8), dtype=nl.uint32, buffer=nl.shared_hbm)
    s = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    s1 = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
    s6 = nl.ndarray((128, 6), dtype=nl.float32, buffer=nl.sbuf)
    s8 = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf)
    su = nl.ndarray((128, 8), dtype=nl.uint32, buffer=nl.sbuf)
    b = nl.ndarray((128, 64), dtype=nl.bfloat16, buffer=nl.sbuf)
    b8 = nl.ndarray((128, 8), dtype=nl.bfloat16, buffer=nl.sbuf)
    t32 = nl.ndarray((32, 32), dtype=nl.float32, buffer=nl.sbuf)
    big = nl.ndarray((128, 1024), dtype=nl.float32, buffer=nl.sbuf)
    i32 = nl.ndarray((128, 64), dtype=nl.int32, buffer=nl.sbuf)
    m = nl.ndarray((128, 64), dtype=nl.uint8, buffer=nl.sbuf)
    pm = nl.ndarray((128, 64), dtype=nl.uint8, buffer=nl.psum)
    pp = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.psum)
    ps = nl.ndarray((64, 64), dtype=nl.float32, buffer=nl.psum)
    x = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    c = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=x, src=a)
    nisa.memset(dst=c, value=1.0)
    nisa.memset(dst=m, value=1)
    nisa.memset(dst=pm, value=1)
    nisa.memset(dst=pp, value=1.0)
    nisa.memset(dst=big, value=1.0)
    nisa.memset(dst=i32, value=1)
    nisa.memset(dst=b, value=1.0)
    {call}
    return h
"""

LEGACY = """
import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
import neuronxcc.nki.isa as nisa


@nki.jit
def kernel(a):
    h = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    h1 = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    hu = nl.ndarray((128, 8), dtype=nl.uint32, buffer=nl.shared_hbm)
    s = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    s1 = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
    su = nl.ndarray((128, 8), dtype=nl.uint32, buffer=nl.sbuf)
    pp = nl.ndarray((64, 64), dtype=nl.float32, buffer=nl.psum)
    x = nl.load(a)
    c = nl.load(a[:, 0:1])
    big = nl.load(nl.ndarray((128, 1024), dtype=nl.float32, buffer=nl.shared_hbm))
    m = nl.copy(x, dtype=nl.uint8)
    pp[...] = nisa.nc_matmul(x[:, 0:64], x[:, 0:64])
    {call}
    return h
"""

# per instruction and API: a call within its rules, then calls that break one rule each, with what the error
# must say; "trn1"/"trn2" as a third item runs the call on that hardware (the default: trn2)
CASES: dict[tuple[str, str], tuple[str, list[tuple[str, str]]] | tuple[str, list[tuple[str, str]], str]] = {
    # ------------------------------------------------------------------ the newer API
    ("dma_copy", "modern"): ("nisa.dma_copy(dst=s, src=a)", [("nisa.dma_copy(dst=pp, src=a)", "PSUM")]),
    ("nc_matmul", "modern"): ("nisa.nc_matmul(dst=ps, stationary=x, moving=x)", [
        ("nisa.nc_matmul(dst=ps, stationary=pp, moving=x)", "SBUF only"),
        ("nisa.nc_matmul(dst=s[0:64, :], stationary=x, moving=x)", "PSUM")]),
    ("nc_transpose", "modern"): ("nisa.nc_transpose(dst=t32, data=x[0:32, 0:32], engine=nisa.vector_engine)", [
        ("nisa.nc_transpose(dst=s, data=x[0:64, :], engine=nisa.vector_engine)", "at most 32x32"),
        ("nisa.nc_transpose(dst=h, data=x)", "PSUM")]),
    ("tensor_tensor", "modern"): ("nisa.tensor_tensor(dst=s, data1=x, data2=x, op=nl.add)", [
        ("nisa.tensor_tensor(dst=h, data1=x, data2=x, op=nl.add)", "HBM"),
        ("nisa.tensor_tensor(dst=s, data1=pp, data2=pp, op=nl.add)", "at most one"),
        ("nisa.tensor_tensor(dst=s, data1=pp, data2=x, op=nl.add, engine=nisa.gpsimd_engine)", "PSUM")]),
    ("tensor_scalar", "modern"): ("nisa.tensor_scalar(dst=s, data=x, op0=nl.add, operand0=1.0)", [
        ("nisa.tensor_scalar(dst=h, data=x, op0=nl.add, operand0=1.0)", "HBM"),
        ("nisa.tensor_scalar(dst=s, data=x, op0=nl.add, operand0=1.0, engine=nisa.tensor_engine)", "cannot run")]),
    ("scalar_tensor_tensor", "modern"): (
        "nisa.scalar_tensor_tensor(dst=s, data=x, op0=nl.add, operand0=1.0, op1=nl.multiply, operand1=x)", [
            ("nisa.scalar_tensor_tensor(dst=h, data=x, op0=nl.add, operand0=1.0, op1=nl.multiply, operand1=x)",
             "HBM")]),
    ("tensor_tensor_scan", "modern"): (
        "nisa.tensor_tensor_scan(dst=s, data0=x, data1=x, initial=0.0, op0=nl.multiply, op1=nl.add)", [
            ("nisa.tensor_tensor_scan(dst=h, data0=x, data1=x, initial=0.0, op0=nl.multiply, op1=nl.add)", "HBM"),
            ("nisa.tensor_tensor_scan(dst=s, data0=pp, data1=pp, initial=0.0, op0=nl.multiply, op1=nl.add)",
             "at most one")]),
    ("tensor_reduce", "modern"): ("nisa.tensor_reduce(dst=s1, op=nl.add, data=x, axis=1, keepdims=True)", [
        ("nisa.tensor_reduce(dst=h1, op=nl.add, data=x, axis=1, keepdims=True)", "HBM")]),
    ("tensor_scalar_reduce", "modern"): (
        "nisa.tensor_scalar_reduce(dst=s, data=x, op0=nl.add, operand0=1.0, reduce_op=nl.add, reduce_res=s1)", [
            ("nisa.tensor_scalar_reduce(dst=h, data=x, op0=nl.add, operand0=1.0, reduce_op=nl.add, reduce_res=s1)",
             "HBM"),
            ("nisa.tensor_scalar_reduce(dst=s, data=x, op0=nl.add, operand0=1.0, reduce_op=nl.add, reduce_res=h1)",
             "HBM")]),
    ("tensor_partition_reduce", "modern"): ("nisa.tensor_partition_reduce(dst=s[0:1, :], op=nl.add, data=x)", [
        ("nisa.tensor_partition_reduce(dst=s[0:1, :], op=nl.add, data=pp)", "PSUM"),
        ("nisa.tensor_partition_reduce(dst=h[0:1, :], op=nl.add, data=x)", "HBM")]),
    ("tensor_copy", "modern"): ("nisa.tensor_copy(dst=s, src=x)", [
        ("nisa.tensor_copy(dst=h, src=x)", "HBM"),
        ("nisa.tensor_copy(dst=s, src=pp, engine=nisa.gpsimd_engine)", "PSUM")]),
    ("activation", "modern"): ("nisa.activation(dst=s, op=nl.exp, data=x, reduce_op=nl.add, reduce_res=s1)", [
        ("nisa.activation(dst=h, op=nl.exp, data=x)", "HBM"),
        ("nisa.activation(dst=s, op=nl.exp, data=x, reduce_op=nl.add, reduce_res=h1)", "HBM")]),
    ("reciprocal", "modern"): ("nisa.reciprocal(dst=s, data=x)", [
        ("nisa.reciprocal(dst=h, data=x)", "HBM"),
        ("nisa.reciprocal(dst=s, data=x, engine=nisa.gpsimd_engine)", "cannot run on the gpsimd")]),
    ("memset", "modern"): ("nisa.memset(dst=s, value=1.0)", [
        ("nisa.memset(dst=h, value=1.0)", "HBM"),
        ("nisa.memset(dst=pp, value=1.0, engine=nisa.gpsimd_engine)", "PSUM")]),
    ("iota", "modern"): ("nisa.iota(dst=i32, pattern=[[1, 64]], offset=0)", [
        ("nisa.iota(dst=h, pattern=[[1, 64]], offset=0)", "HBM"),
        ("nisa.iota(dst=pp, pattern=[[1, 64]], offset=0)", "PSUM")]),
    ("select", "modern"): ("nisa.tensor_copy_predicated(dst=s, src=x, predicate=x)", [
        ("nisa.tensor_copy_predicated(dst=h, src=x, predicate=x)", "HBM"),
        ("nisa.tensor_copy_predicated(dst=s, src=pp, predicate=pp)", "at most one")]),
    ("affine_select", "modern"): (
        "nisa.affine_select(dst=s, pattern=[[1, 64]], offset=0, channel_multiplier=1, on_true_tile=x, "
        "on_false_value=0.0, cmp_op=nl.greater_equal)", [
            ("nisa.affine_select(dst=h, pattern=[[1, 64]], offset=0, channel_multiplier=1, on_true_tile=x, "
             "on_false_value=0.0, cmp_op=nl.greater_equal)", "HBM")]),
    ("bn_stats", "modern"): ("nisa.bn_stats(dst=s6, data=x)", [
        ("nisa.bn_stats(dst=h6, data=x)", "HBM"), ("nisa.bn_stats(dst=s6, data=big)", "at most 512")]),
    ("bn_aggr", "modern"): ("nisa.bn_aggr(dst=s[:, 0:2], data=x[:, 0:6])", [
        ("nisa.bn_aggr(dst=h[:, 0:2], data=x[:, 0:6])", "HBM")]),
    ("dropout", "modern"): ("nisa.dropout(dst=s, data=x, prob=0.0)", [
        ("nisa.dropout(dst=h, data=x, prob=0.0)", "HBM")]),
    ("random_seed", "modern"): ("nl.random_seed(c[0:1, 0:1])", [("nl.random_seed(a[0:1, 0:1])", "HBM")]),
    ("nc_stream_shuffle", "modern"): ("nisa.nc_stream_shuffle(dst=s, src=x, shuffle_mask=[0] * 32)", [
        ("nisa.nc_stream_shuffle(dst=h, src=x, shuffle_mask=[0] * 32)", "HBM")]),
    ("max8", "modern"): ("nisa.max8(dst=s8, src=x)", [
        ("nisa.max8(dst=h[:, 0:8], src=x)", "HBM"), ("nisa.max8(dst=s8, src=x[:, 0:4])", "8 to 16384")]),
    ("nc_find_index8", "modern"): ("nisa.nc_find_index8(dst=su, data=x, vals=x[:, 0:8])", [
        ("nisa.nc_find_index8(dst=hu, data=x, vals=x[:, 0:8])", "HBM"),
        ("nisa.nc_find_index8(dst=s8, data=x, vals=x[:, 0:8])", "uint16 or uint32")]),
    ("nc_match_replace8", "modern"): ("nisa.nc_match_replace8(dst=s, data=x, vals=x[:, 0:8], imm=0.0, dst_idx=su)", [
        ("nisa.nc_match_replace8(dst=s, data=x, vals=x[:, 0:8], imm=0.0, dst_idx=hu)", "HBM"),
        ("nisa.nc_match_replace8(dst=s, data=x, vals=x[:, 0:8], imm=0.0, dst_idx=s8)", "uint16 or uint32")]),
    ("range_select", "modern"): (
        "nisa.range_select(dst=s, on_true_tile=x, comp_op0=nl.greater_equal, comp_op1=nl.less, bound0=c, bound1=c)",
        [("nisa.range_select(dst=h, on_true_tile=x, comp_op0=nl.greater_equal, comp_op1=nl.less, bound0=c, "
          "bound1=c)", "HBM")]),
    ("select_reduce", "modern"): ("nisa.select_reduce(dst=s, predicate=m, on_true=x, on_false=0.0, reduce_res=s1)", [
        ("nisa.select_reduce(dst=h, predicate=m, on_true=x, on_false=0.0)", "HBM"),
        ("nisa.select_reduce(dst=s, predicate=m, on_true=x, on_false=0.0, reduce_res=h1)", "HBM"),
        ("nisa.select_reduce(dst=s, predicate=x, on_true=x, on_false=0.0)", "predicate operand .* float32"),
        ("nisa.select_reduce(dst=s, predicate=m, on_true=i32, on_false=0.0)", "on_true operand .* int32"),
        ("nisa.select_reduce(dst=s, predicate=pm, on_true=pp, on_false=0.0)", "at most one")]),
    ("tensor_scalar_cumulative", "modern"): (
        "nisa.tensor_scalar_cumulative(dst=s, src=x, op0=nl.multiply, op1=nl.add, imm0=2.0)", [
            ("nisa.tensor_scalar_cumulative(dst=h, src=x, op0=nl.multiply, op1=nl.add, imm0=2.0)", "HBM"),
            ("nisa.tensor_scalar_cumulative(dst=i32, src=x, op0=nl.multiply, op1=nl.add, imm0=2.0)", "int32")]),
    ("topk", "modern"): ("nisa.topk(val_dst=b8, idx_dst=su, src=b, n=64)", [
        ("nisa.topk(val_dst=b8, idx_dst=hu, src=b, n=64)", "HBM"),
        ("nisa.topk(val_dst=b8, idx_dst=su, src=x, n=64)", "src operand .* float32"),
        ("nisa.topk(val_dst=s8, idx_dst=su, src=b, n=64)", "val_dst operand .* float32"),
        ("nisa.topk(val_dst=b8, idx_dst=s8, src=b, n=64)", "idx_dst operand .* float32")]),
    # ------------------------------------------------------------------ the legacy API (results are new SBUF tiles)
    ("dma_copy", "legacy"): ("nisa.dma_copy(src=a, dst=s)", [("nisa.dma_copy(src=a[0:64, :], dst=pp)", "PSUM")]),
    ("nc_matmul", "legacy"): ("nisa.nc_matmul(x, x)", [("nisa.nc_matmul(a, x)", "SBUF only")]),
    ("nc_transpose", "legacy"): ("nisa.nc_transpose(x[0:32, 0:32], engine=nisa.vector_engine)", [
        ("nisa.nc_transpose(x, engine=nisa.vector_engine)", "at most 32x32"), ("nisa.nc_transpose(a)", "HBM")]),
    ("tensor_tensor", "legacy"): ("nisa.tensor_tensor(x, x, nl.add)", [
        ("nisa.tensor_tensor(a, x, nl.add)", "HBM"), ("nisa.tensor_tensor(pp, pp, nl.add)", "at most one")]),
    ("tensor_scalar", "legacy"): ("nisa.tensor_scalar(x, nl.add, 1.0)", [
        ("nisa.tensor_scalar(a, nl.add, 1.0)", "HBM")]),
    ("scalar_tensor_tensor", "legacy"): (
        "nisa.scalar_tensor_tensor(data=x, op0=nl.add, operand0=1.0, op1=nl.multiply, operand1=x)", [
            ("nisa.scalar_tensor_tensor(data=a, op0=nl.add, operand0=1.0, op1=nl.multiply, operand1=x)", "HBM")]),
    ("tensor_tensor_scan", "legacy"): ("nisa.tensor_tensor_scan(x, x, 0.0, nl.multiply, nl.add)", [
        ("nisa.tensor_tensor_scan(a, x, 0.0, nl.multiply, nl.add)", "HBM"),
        ("nisa.tensor_tensor_scan(pp, pp, 0.0, nl.multiply, nl.add)", "at most one")]),
    ("tensor_reduce", "legacy"): ("nisa.tensor_reduce(nl.add, x, axis=1)", [("nisa.tensor_reduce(nl.add, a, axis=1)",
                                                                            "HBM")]),
    ("tensor_scalar_reduce", "legacy"): (
        "nisa.tensor_scalar_reduce(data=x, op0=nl.add, operand0=1.0, reduce_op=nl.add, reduce_res=s1)", [
            ("nisa.tensor_scalar_reduce(data=x, op0=nl.add, operand0=1.0, reduce_op=nl.add, reduce_res=h1)", "HBM")]),
    ("tensor_partition_reduce", "legacy"): ("nisa.tensor_partition_reduce(nl.add, x)", [
        ("nisa.tensor_partition_reduce(nl.add, pp)", "PSUM")]),
    ("tensor_copy", "legacy"): ("nisa.tensor_copy(x)", [("nisa.tensor_copy(a)", "HBM")]),
    ("activation", "legacy"): ("nisa.activation_reduce(op=nl.exp, data=x, reduce_op=nl.add, reduce_res=s1)", [
        ("nisa.activation_reduce(op=nl.exp, data=x, reduce_op=nl.add, reduce_res=h1)", "HBM"),
        ("nisa.activation(op=nl.exp, data=a)", "HBM")]),
    ("reciprocal", "legacy"): ("nisa.reciprocal(x)", [("nisa.reciprocal(a)", "HBM")]),
    ("memset", "legacy"): ("nisa.memset((128, 64), 1.0, nl.float32)", [
        ("nisa.memset((128, 64), 1.0, nl.float32, engine=nisa.scalar_engine)", "cannot run on the scalar")]),
    ("iota", "legacy"): ("nisa.iota(nl.arange(64)[None, :], dtype=nl.int32)", [
        ("nisa.iota(nl.arange(256)[:, None], dtype=nl.int32)", "partition")]),
    ("select", "legacy"): ("nisa.tensor_copy_predicated(src=x, dst=s, predicate=x)", [
        ("nisa.tensor_copy_predicated(src=x, dst=h, predicate=x)", "HBM")]),
    ("affine_select", "legacy"): ("nisa.affine_select(nl.arange(128)[:, None] >= nl.arange(64)[None, :], x, 0.0)", [
        ("nisa.affine_select(nl.arange(128)[:, None] >= nl.arange(64)[None, :], a, 0.0)", "HBM")]),
    ("bn_stats", "legacy"): ("nisa.bn_stats(x)", [("nisa.bn_stats(big)", "at most 512")]),
    ("bn_aggr", "legacy"): ("nisa.bn_aggr(x[:, 0:6])", [("nisa.bn_aggr(a[:, 0:6])", "HBM")]),
    ("dropout", "legacy"): ("nisa.dropout(x, 0.0)", [("nisa.dropout(a, 0.0)", "HBM")]),
    ("random_seed", "legacy"): ("nl.random_seed(x[0:1, 0:1])", [("nl.random_seed(a[0:1, 0:1])", "HBM")]),
    ("nc_stream_shuffle", "legacy"): ("nisa.nc_stream_shuffle(src=x, dst=s, shuffle_mask=[0] * 32)", [
        ("nisa.nc_stream_shuffle(src=x, dst=h, shuffle_mask=[0] * 32)", "HBM")]),
    ("max8", "legacy"): ("nisa.max8(src=x)", [("nisa.max8(src=x[:, 0:4])", "8 to 16384")]),
    ("nc_find_index8", "legacy"): ("nisa.nc_find_index8(data=x, vals=x[:, 0:8])", [
        ("nisa.nc_find_index8(data=x, vals=x[:, 0:8], dtype=nl.float32)", "uint16 or uint32")]),
    ("nc_match_replace8", "legacy"): ("nisa.nc_match_replace8(data=x, vals=x[:, 0:8], imm=0.0, dst_idx=su)", [
        ("nisa.nc_match_replace8(data=x, vals=x[:, 0:8], imm=0.0, dst_idx=hu)", "HBM")]),
    ("range_select", "legacy"): (
        "nisa.range_select(on_true_tile=x, comp_op0=nl.greater_equal, comp_op1=nl.less, bound0=c, bound1=c)", [
            ("nisa.range_select(on_true_tile=a, comp_op0=nl.greater_equal, comp_op1=nl.less, bound0=c, bound1=c)",
             "HBM")]),
    ("select_reduce", "legacy"): ("nisa.select_reduce(dst=s, predicate=m, on_true=x, on_false=0.0, reduce_res=s1)", [
        ("nisa.select_reduce(dst=h, predicate=m, on_true=x, on_false=0.0)", "HBM"),
        ("nisa.select_reduce(dst=s, predicate=x, on_true=x, on_false=0.0)", "predicate operand .* float32")]),
}


def _has(op: str, api: str) -> bool:
    declared = DECLARED[op]
    return bool(declared.legacy if api == "legacy" else declared.modern) or bool(declared.language)


def test_every_instruction_has_its_rules_tried_in_every_api_that_has_it() -> None:
    expected = {(op, api) for op in DECLARED for api in ("legacy", "modern") if _has(op, api)}
    assert set(CASES) == expected


def _run(tmp_path: Path, api: str, call: str, hardware: str = "trn2") -> None:
    path = tmp_path / "kernel.py"
    path.write_text((LEGACY if api == "legacy" else MODERN).replace("{call}", call))
    a = np.random.default_rng(0).random((128, 64), dtype=np.float32)
    run_kernel(load_kernel(str(path)), [a], {}, numeric=True, hardware=hardware)


@pytest.mark.parametrize(("op", "api"), sorted(CASES))
def test_each_declared_rule_is_enforced(tmp_path: Path, op: str, api: str) -> None:
    good, bad = CASES[op, api][:2]
    _run(tmp_path, api, good)
    for call, says in bad:
        with pytest.raises(HardwareRuleError, match=says):
            _run(tmp_path, api, call)


@pytest.mark.parametrize(("op", "api"), [(op, api) for op in DECLARED for api in ("legacy", "modern")
                                         if 2 not in DECLARED[op].versions and (op, api) in CASES])
def test_an_instruction_of_later_neuron_cores_stops_on_trn1(tmp_path: Path, op: str, api: str) -> None:
    with pytest.raises(HardwareRuleError, match=re.escape("NeuronCore-v3 and later, not v2 (trn1)")):
        _run(tmp_path, api, CASES[op, api][0], hardware="trn1")


TRANSPOSING_MATMUL = """
import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def kernel(a, identity):
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    result = nisa.nc_matmul(nl.load(a), nl.load(identity), is_transpose=True)
    nl.store(out, value=nl.copy(result))
    return out
"""


def test_a_matmul_in_transpose_mode_has_a_matmuls_sizes(tmp_path: Path) -> None:
    """nc_matmul(is_transpose=True) records a transpose, but within the matmul's limits (a moving free size of
    512), not nc_transpose's 128x128: autocomp's attention version 02, timed on trn1, stopped on that rule."""
    path = tmp_path / "kernel.py"
    path.write_text(TRANSPOSING_MATMUL)
    a = np.random.default_rng(0).random((128, 128), dtype=np.float32)
    result = run_kernel(load_kernel(str(path)), [a, np.eye(128, 512, dtype=np.float32)], {}, numeric=True)
    np.testing.assert_allclose(result.outputs[0][:, :128], a.T @ np.eye(128, dtype=np.float32), rtol=1e-6)
