"""Hardware rules the compiler enforces: each error names the rule, the sizes and the kernel line."""

from __future__ import annotations

import numpy as np
import pytest

from accelopt_core.nki import HardwareRuleError, KernelUsageError, UnsupportedApiError

HEADER = """
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
import neuronxcc.nki.isa as nisa
"""


def _kernel(body: str) -> str:
    return HEADER + "\n@nki.jit\ndef kernel(a, b):\n" + "\n".join("    " + line for line in body.strip().splitlines())


A = np.zeros((256, 1024), np.float32)
B = np.zeros((128, 1024), np.float32)


@pytest.mark.parametrize(("body", "needles"), [
    ("t = nl.ndarray((256, 64), dtype=nl.float32, buffer=nl.sbuf)  # ERR",
     ["partition dimension 256", "limit of 128", "(256, 64)"]),
    ("t = nl.zeros((129, 4), dtype=nl.float32, buffer=nl.psum)  # ERR", ["partition dimension 129"]),
    ("t = nl.ndarray((2, nl.par_dim(200), 4), dtype=nl.float32)  # ERR", ["partition dimension 200"]),
    ("t = nl.load(a[0:256, 0:64])  # ERR", ["partition dimension 256", "(256, 64)"]),
])
def test_partition_dimension_limit(fails, body, needles):
    err = fails(_kernel(body + "\nreturn a"), A, B, error=HardwareRuleError)
    for needle in needles:
        assert needle in err.message


def test_matmul_stationary_free_limit(fails):
    err = fails(_kernel("""
s = nl.load(a[0:128, 0:256])
m = nl.load(b[:, 0:512])
r = nisa.nc_matmul(s, m)  # ERR
return a
"""), A, B, error=HardwareRuleError)
    assert "stationary free size 256 exceeds 128" in err.message


def test_matmul_moving_free_limit(fails):
    err = fails(_kernel("""
s = nl.load(a[0:128, 0:128])
m = nl.load(b)
r = nl.matmul(s, m, transpose_x=True)  # ERR
return a
"""), A, B, error=HardwareRuleError)
    assert "moving free size 1024 exceeds 512" in err.message


def test_matmul_contraction_limit(fails):
    # nl.matmul(x, y) contracts over x's free axis, which the compiler moves onto partitions
    err = fails(_kernel("""
x = nl.load(a[0:128, 0:256])
y = nl.load(b[:, 0:512])
r = nl.matmul(x, y)  # ERR
return a
"""), A, B, error=HardwareRuleError)
    assert "contraction dimension 256 exceeds 128" in err.message


def test_matmul_contraction_sizes_must_agree(fails):
    err = fails(_kernel("""
x = nl.load(a[0:64, 0:128])
y = nl.load(b[0:128, 0:512])
r = nisa.nc_matmul(x, y)  # ERR
return a
"""), A, B)
    assert "contraction" in err.message and "(64, 128)" in err.message


@pytest.mark.parametrize("operand", ["stationary", "moving"])
def test_matmul_operand_must_be_in_sbuf(fails, operand):
    args = "p, m" if operand == "stationary" else "m, p"
    err = fails(_kernel(f"""
m = nl.load(b[:, 0:128])
p = nisa.nc_matmul(m, m)
r = nisa.nc_matmul({args})  # ERR
return a
"""), A, B, error=HardwareRuleError)
    assert f"matmul {operand} operand" in err.message and "PSUM" in err.message and "SBUF only" in err.message


def test_matmul_operand_in_hbm(fails):
    err = fails(_kernel("""
m = nl.load(b[:, 0:128])
r = nisa.nc_matmul(b[:, 0:128], m)  # ERR
return a
"""), A, B, error=HardwareRuleError)
    assert "HBM" in err.message


def test_psum_tile_bigger_than_a_bank(fails):
    err = fails(_kernel("""
acc = nl.zeros((128, 1024), dtype=nl.float32, buffer=nl.psum)  # ERR
return a
"""), A, B, error=HardwareRuleError)
    assert "4096 bytes per partition" in err.message and "2048" in err.message and "PSUM" in err.message


def test_psum_block_dimensions_are_logical(run):
    """The compiler allocates a block tensor block by block, so blocks adding up to more
    than the 16 KiB of PSUM are no error (the public NKIBench baselines declare such tensors)."""
    both = run(_kernel("""
acc = nl.zeros((3, 8, 4, nl.par_dim(128), 512), dtype=nl.float32, buffer=nl.psum, lazy_initialization=True)
for i in nl.affine_range(3):
    acc[i, 0, 0] = nl.load(a[0:128, 0:512])
    nl.store(a[0:128, 0:512], value=nl.copy(acc[i, 0, 0]))
return a
"""), A.copy(), B)
    assert both.instructions


def test_scalar_kernel_argument(run):
    """A 0-d input (the epsilon a reference passes) reaches the kernel as the number it is."""
    both = run(HEADER + """
@nki.jit
def kernel(a, eps):
    out = nl.ndarray((128, 1024), dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.add(nl.load(a[0:128, 0:1024]), eps))
    return out
""", A, np.asarray(0.5, np.float32))
    assert np.allclose(both.out, A[:128] + 0.5)


def test_sbuf_tile_bigger_than_a_partition(fails):
    err = fails(_kernel("""
t = nl.ndarray((128, 50000), dtype=nl.float32, buffer=nl.sbuf)  # ERR
return a
"""), A, B, error=HardwareRuleError)
    assert "200000 bytes per partition" in err.message and "196608" in err.message and "trn1" in err.message


def test_sbuf_tile_limit_on_trn2(fails, run):
    ok = run(_kernel("""
t = nl.ndarray((128, 50000), dtype=nl.float32, buffer=nl.sbuf)
return a
"""), A, B, hardware="trn2")
    assert ok.instructions == []
    err = fails(_kernel("""
t = nl.ndarray((128, 60000), dtype=nl.float32, buffer=nl.sbuf)  # ERR
return a
"""), A, B, error=HardwareRuleError, hardware="trn2")
    assert "229376" in err.message and "trn2" in err.message


@pytest.mark.parametrize("call", ["nl.exp(a)", "nl.add(a, 1.0)", "nisa.tensor_copy(a)", "nl.sum(a, axis=1)",
                                  "nisa.activation(op=nl.exp, data=a)"])
def test_computing_on_hbm_directly(fails, call):
    err = fails(_kernel(f"""
r = {call}  # ERR
return a
"""), A[:128], B, error=HardwareRuleError)
    assert "HBM tensor a" in err.message and "load it into SBUF" in err.message


def test_storing_into_sbuf(fails):
    err = fails(_kernel("""
t = nl.load(b[:, 0:4])
u = nl.ndarray((128, 4), dtype=nl.float32, buffer=nl.sbuf)
nl.store(u, value=t)  # ERR
return a
"""), A, B, error=HardwareRuleError)
    assert "nl.store writes to an HBM tensor" in err.message


def test_out_of_bounds_slice(fails):
    err = fails(_kernel("""
t = nl.load(b[0:128, 1000:1100])  # ERR
return a
"""), A, B, error=HardwareRuleError)
    assert "1000:1100" in err.message and "size 1024" in err.message


def test_error_in_a_helper_points_at_the_helper_line(fails):
    fails(HEADER + """
def helper(x):
    return nl.exp(x)  # ERR

@nki.jit
def kernel(a):
    return helper(a)
""", A, error=HardwareRuleError)


@pytest.mark.parametrize(("expr", "name"), [("nl.some_missing_fn(a)", "nki.language.some_missing_fn"),
                                            ("nisa.nonexistent(a)", "nki.isa.nonexistent"),
                                            ("nki.not_there", "nki.not_there")])
def test_unimplemented_api(fails, expr, name):
    err = fails(_kernel(f"""
r = {expr}  # ERR
return a
"""), A, B, error=UnsupportedApiError)
    assert name in err.message
    assert "unsupported NKI API" in str(err)


@pytest.mark.parametrize(("expr", "needle"), [
    ("nisa.nc_matmul(x[nl.arange(128)[:, None] < 64], x)", "varies along the contraction"),
    ("nisa.nc_matmul(x[:, 0:100], x, mask=(nl.arange(128)[:, None] < 100))", "contraction rows"),
])
def test_unimplemented_indexing_forms(fails, expr, needle):
    # Documented NKI forms the simulator does not model (an operand mask over the contraction rows): they
    # must fail loudly, not compute something else.
    err = fails(_kernel(f"""
idx = nl.load(b[:, 0:1])
x = nl.load(b[:, 0:128])
r = {expr}  # ERR
return a
"""), A, B, error=UnsupportedApiError)
    assert needle in err.message


def test_unimplemented_api_in_the_new_package(fails):
    err = fails("""
import nki
import nki.language as nl
import nki.isa as nisa

@nki.jit
def kernel(a):
    nisa.nonexistent_instruction(a)  # ERR
    return a
""", A, error=UnsupportedApiError)
    assert "nonexistent_instruction" in err.message


def test_a_view_cannot_move_the_partition_dimension_of_an_on_chip_tensor(fails):
    err = fails("""
import nki
import nki.language as nl

@nki.jit
def kernel(a):
    t = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    v = t.permute((1, 0))  # ERR
    return a
""", A, error=KernelUsageError)
    assert "partition dimension" in err.message


def test_an_access_pattern_attribute_not_simulated_is_named(fails):
    err = fails("""
import nki
import nki.language as nl

@nki.jit
def kernel(a):
    t = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    s = t.strides  # ERR
    return a
""", A, error=UnsupportedApiError)
    assert "tensor.strides" in err.message


@pytest.mark.parametrize("line", [
    "r = nl.ndarray((64, 128), dtype=nl.float32, buffer=nl.sbuf)\nr[...] = nl.exp(t)  # ERR",
    "r = nisa.tensor_tensor(t, nl.ndarray((64, 128), dtype=nl.float32, buffer=nl.sbuf), op=nl.add)  # ERR",
])
def test_compute_engines_do_not_move_data_across_partitions(fails, line):
    """Element i meets element i in the same lane: an operand of the output's size on other partitions
    would be a reshape across lanes, which only a transpose, a matmul or a DMA does."""
    err = fails(_kernel(f"t = nl.load(a[0:128, 0:64])\n{line}\nreturn a"), A, B, error=HardwareRuleError)
    assert "work lane by lane" in err.message


def test_an_index_expression_given_as_data_is_named(fails):
    """A public kernel passed `nl.arange` grids where a tile belongs: an AttributeError from inside the simulator
    was shown as if it were the kernel's; it is an invalid use, and says what makes a tile of indices."""
    err = fails("""
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
import neuronxcc.nki.isa as nisa

@nki.jit
def kernel(a):
    i_f = nl.arange(64)[None, :]
    y = nisa.tensor_scalar(data=i_f, op0=nl.multiply, operand0=2.0)  # ERR
    return a
""", A, error=KernelUsageError)
    assert "IndexExpr" in err.message and "nisa.iota" in err.message
