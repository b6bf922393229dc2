"""The instruction and operator names the simulator and the performance model share are one vocabulary:
`Op` lists exactly the instructions ops.py emits, `Alu` exactly the operators its ALU table computes."""

from __future__ import annotations

import inspect

from accelopt_core.nki import ops
from accelopt_core.nki.trace import Alu, Op


def test_every_instruction_name_is_one_the_simulator_emits() -> None:
    source = inspect.getsource(ops)
    assert [op for op in Op if f"Op.{op.name}" not in source] == []


def test_the_alu_table_computes_exactly_the_named_operators() -> None:
    assert set(ops.ALU) == set(Alu)
    assert all(type(name) is Alu for name in ops.ALU)


def test_names_keep_their_spelling() -> None:
    """Tapes, reports and JSON show the names, not the members."""
    assert Op.TENSOR_TENSOR == "tensor_tensor" and f"{Op.NC_MATMUL}" == "nc_matmul"
    assert {"add": 1}[Alu.ADD] == 1 and str(Alu.ABS_MAX) == "abs_max"
