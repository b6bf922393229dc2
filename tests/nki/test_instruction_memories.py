"""Which memories each instruction may write (its declaration in nki/instructions.py), instruction by instruction,
in both APIs: only DMA reaches HBM. A compute instruction handed an HBM destination would otherwise finish a
kernel with no store DMA at all, so its output traffic would never be priced."""

from __future__ import annotations

import numpy as np
import pytest

from accelopt_core.nki import HardwareRuleError, load_kernel, run_kernel
from accelopt_core.nki.instructions import DECLARED
from accelopt_core.nki.trace import Op

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
    h8 = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.shared_hbm)
    hu = nl.ndarray((128, 8), dtype=nl.uint32, buffer=nl.shared_hbm)
    s = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    s1 = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
    s6 = nl.ndarray((128, 6), dtype=nl.float32, buffer=nl.sbuf)
    s8 = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf)
    su = nl.ndarray((128, 8), dtype=nl.uint32, buffer=nl.sbuf)
    x = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    c = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=x, src=a)
    nisa.memset(dst=c, value=1.0)
    {call}
    return h
"""

# one call per instruction; {o}: the destination's memory prefix ("s": SBUF, "h": HBM)
MODERN_CALLS = {
    "activation": "nisa.activation(dst={o}, op=nl.exp, data=x)",
    "activation reduce_res": "nisa.activation(dst=s, op=nl.exp, data=x, reduce_op=nl.add, reduce_res={o}1)",
    "tensor_tensor": "nisa.tensor_tensor(dst={o}, data1=x, data2=x, op=nl.add)",
    "tensor_scalar": "nisa.tensor_scalar(dst={o}, data=x, op0=nl.add, operand0=1.0)",
    "scalar_tensor_tensor": "nisa.scalar_tensor_tensor(dst={o}, data=x, op0=nl.add, operand0=1.0, op1=nl.multiply,"
                            " operand1=x)",
    "tensor_reduce": "nisa.tensor_reduce(dst={o}1, op=nl.add, data=x, axis=1, keepdims=True)",
    "tensor_copy": "nisa.tensor_copy(dst={o}, src=x)",
    "tensor_tensor_scan": "nisa.tensor_tensor_scan(dst={o}, data0=x, data1=x, initial=0.0, op0=nl.multiply,"
                          " op1=nl.add)",
    "memset": "nisa.memset(dst={o}, value=1.0)",
    "reciprocal": "nisa.reciprocal(dst={o}, data=x)",
    "tensor_scalar_reduce": "nisa.tensor_scalar_reduce(dst={o}, data=x, op0=nl.add, operand0=1.0, reduce_op=nl.add,"
                            " reduce_res=c)",
    "tensor_scalar_reduce reduce_res": "nisa.tensor_scalar_reduce(dst=s, data=x, op0=nl.add, operand0=1.0,"
                                       " reduce_op=nl.add, reduce_res={o}1)",
    "bn_stats": "nisa.bn_stats(dst={o}6, data=x)",
    "dropout": "nisa.dropout(dst={o}, data=x, prob=0.0)",
    "max8": "nisa.max8(dst={o}8, src=x)",
    "nc_match_replace8 dst_idx": "nisa.nc_match_replace8(dst=s, data=x, vals=x[:, 0:8], imm=0.0, dst_idx={o}u)",
    "iota": "nisa.iota(dst={o}, pattern=[[1, 64]], offset=0)",
    "tensor_copy_predicated": "nisa.tensor_copy_predicated(dst={o}, src=x, predicate=x)",
}


def _run(tmp_path, source: str) -> None:
    path = tmp_path / "kernel.py"
    path.write_text(source)
    a = np.random.default_rng(0).random((128, 64), dtype=np.float32)
    run_kernel(load_kernel(str(path)), [a], {}, numeric=True)


def test_every_instruction_has_its_memories_and_only_dma_writes_hbm() -> None:
    assert set(DECLARED) == set(Op)
    assert [op for op, d in DECLARED.items() if "hbm" in d.writes] == [Op.DMA_COPY]
    assert [op for op, d in DECLARED.items() if "hbm" in d.reads] == [Op.DMA_COPY]
    assert DECLARED[Op.NC_MATMUL].writes == ("psum",)


@pytest.mark.parametrize("name", sorted(MODERN_CALLS))
def test_modern_compute_instruction_writes_sbuf_but_not_hbm(tmp_path, name: str) -> None:
    call = MODERN_CALLS[name]
    _run(tmp_path, MODERN.format(call=call.format(o="s")))  # the same call into SBUF runs
    with pytest.raises(HardwareRuleError, match="HBM"):
        _run(tmp_path, MODERN.format(call=call.format(o="h")))


LEGACY = """
import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
import neuronxcc.nki.isa as nisa


@nki.jit
def kernel(a):
    h = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    h1 = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    h8 = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.shared_hbm)
    hu = nl.ndarray((128, 8), dtype=nl.uint32, buffer=nl.shared_hbm)
    s = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    s1 = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
    s8 = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf)
    su = nl.ndarray((128, 8), dtype=nl.uint32, buffer=nl.sbuf)
    x = nl.load(a)
    {call}
    return h
"""

# the legacy calls that take a tile to write (everything else returns a new SBUF tile)
LEGACY_CALLS = {
    "activation reduce_res": "nisa.activation(op=nl.exp, data=x, reduce_op=nl.add, reduce_res={o}1)",
    "activation_reduce": "nisa.activation_reduce(op=nl.exp, data=x, reduce_op=nl.add, reduce_res={o}1)",
    "tensor_scalar_reduce": "nisa.tensor_scalar_reduce(data=x, op0=nl.add, operand0=1.0, reduce_op=nl.add,"
                            " reduce_res={o}1)",
    "tensor_copy_predicated": "nisa.tensor_copy_predicated(src=x, dst={o}, predicate=x)",
    "nc_match_replace8 dst_idx": "nisa.nc_match_replace8(data=x, vals=x[:, 0:8], imm=0.0, dst_idx={o}u)",
}


@pytest.mark.parametrize("name", sorted(LEGACY_CALLS))
def test_legacy_compute_instruction_writes_sbuf_but_not_hbm(tmp_path, name: str) -> None:
    call = LEGACY_CALLS[name]
    _run(tmp_path, LEGACY.format(call=call.format(o="s")))
    with pytest.raises(HardwareRuleError, match="HBM"):
        _run(tmp_path, LEGACY.format(call=call.format(o="h")))


def test_legacy_assignment_of_a_result_to_hbm_is_a_priced_store(tmp_path) -> None:
    # `h[...] = nl.exp(x)` is not a compute engine writing HBM: the result is stored by a DMA the trace holds
    path = tmp_path / "kernel.py"
    path.write_text(LEGACY.format(call="h[...] = nl.exp(x)"))
    a = np.random.default_rng(0).random((128, 64), dtype=np.float32)
    run = run_kernel(load_kernel(str(path)), [a], {}, numeric=True)
    np.testing.assert_allclose(run.outputs[0], np.exp(a), rtol=1e-6)
    assert [i.op for i in run.trace.instructions][-2:] == ["activation", "dma_copy"]
