"""`nki.compiler` direct allocation: modulo and function placements, their rules, the physical tiles the
trace records (footprint and rotation the performance model sees), and the compiler decorators."""

from __future__ import annotations

import numpy as np
import pytest

from accelopt_core.hardware import load_hardware
from accelopt_core.nki import HardwareRuleError, KernelUsageError
from accelopt_core.perfmodel.costs import CostModel
from accelopt_core.perfmodel.scheduler import schedule

HEADER = """
import functools
import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.compiler as ncc
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
"""

# four [128, 64] blocks of a rotate through two physical SBUF tiles; each is doubled and stored
ROTATING = HEADER + """
@nki.jit
def kernel(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    buf = nl.ndarray((4, nl.par_dim(128), 64), dtype=a.dtype,
                     buffer=ncc.sbuf.mod_alloc(base_addr=1024, num_free_tiles=(2,)))
    for i in nl.affine_range(4):
        buf[i] = nl.load(a[i * 128:(i + 1) * 128, :])
        nl.store(out[i * 128:(i + 1) * 128, :], value=nl.multiply(buf[i], 2.0))
    return out
"""


def test_modulo_sbuf_allocation_computes_and_records_the_physical_tiles(run, rng):
    a = rng.standard_normal((512, 64)).astype(np.float32)
    both = run(ROTATING, a)
    np.testing.assert_allclose(both.out, 2 * a)
    info = next(t for t in both.traced.trace.tensors.values() if t.placement is not None)
    # two physical tiles of 64 float32 per partition, at byte 1024 and 1024 + 256
    assert info.shape == (2, 128, 64) and info.bytes_per_partition == 2 * 256
    assert info.placement == ((0, 1024), (0, 1280))
    loads = [i for i in both.instructions if i.op == "dma_copy" and i.writes[0].tensor == info.id]
    assert [load.writes[0].region[0] for load in loads] == [(0, 1), (1, 2), (0, 1), (1, 2)]


def test_blocks_sharing_a_physical_tile_are_ordered_by_the_model(run, rng):
    # block 2 reuses block 0's tile: its load may not start before block 0's last reader is done
    both = run(ROTATING, rng.standard_normal((512, 64)).astype(np.float32))
    trace = both.traced.trace
    hardware = load_hardware("trn1")
    timed = schedule(trace, hardware, CostModel(hardware))
    ops = list(enumerate(trace.instructions))
    loads = [i for i, inst in ops if inst.op == "dma_copy" and inst.writes[0].buffer == "sbuf"]
    doubles = [i for i, inst in ops if inst.op == "tensor_scalar"]
    assert timed.start[loads[2]] >= timed.end[doubles[0]]
    assert timed.start[loads[1]] < timed.end[doubles[0]]  # a different tile: free to overlap


def test_psum_modulo_and_function_allocation(run, rng):
    s = rng.standard_normal((128, 128)).astype(np.float32)
    m = rng.standard_normal((128, 4, 128)).astype(np.float32)
    both = run(HEADER + """
def by_bank(bank_map, idx, pdim_size, fdim_size):
    return (bank_map[idx], 0, 0)


@nki.jit
def kernel(s, m):
    out = nl.ndarray((4, 128, 128), dtype=nl.float32, buffer=nl.shared_hbm)
    stationary = nl.load(s)
    rotating = nl.ndarray((4, nl.par_dim(128), 128), dtype=nl.float32,
                          buffer=ncc.psum.mod_alloc(base_bank=2, num_bank_tiles=(2,)))
    mapped = nl.ndarray((2, nl.par_dim(128), 128), dtype=nl.float32,
                        buffer=ncc.psum.alloc(functools.partial(by_bank, bank_map={(0,): 7, (1,): 5})))
    for i in nl.affine_range(4):
        rotating[i] = nisa.nc_matmul(stationary, nl.load(m[:, i, :]))
        nl.store(out[i], value=nl.copy(rotating[i]))
    mapped[1] = nisa.nc_matmul(stationary, nl.load(m[:, 0, :]))
    nl.store(out[0], value=nl.copy(mapped[1]))
    return out
""", s, m)
    expected = np.einsum("km,kin->imn", s, m)
    np.testing.assert_allclose(both.out, expected, rtol=1e-4, atol=1e-4)
    placements = [t.placement for t in both.traced.trace.tensors.values() if t.placement is not None]
    assert placements == [((2, 0, 0), (3, 0, 0)), ((7, 0, 0), (5, 0, 0))]


def test_allocated_psum_is_sized_by_its_physical_tiles(run):
    # 32 logical 2 KiB blocks rotating over 4 banks: 8 KiB, not the 64 KiB of the logical tensor
    both = run(HEADER + """
@nki.jit
def kernel(a):
    big = nl.ndarray((32, nl.par_dim(128), 512), dtype=nl.float32,
                     buffer=ncc.psum.mod_alloc(base_bank=0, num_bank_tiles=(4,)))
    return a
""", np.zeros((1, 1), np.float32))
    info = next(t for t in both.traced.trace.tensors.values() if t.placement is not None)
    assert info.bytes_per_partition == 4 * 2048 and info.shape == (4, 128, 512)


@pytest.mark.parametrize(("buffer", "message"), [
    ("ncc.psum.mod_alloc(base_bank=7, num_bank_tiles=(2,))", "PSUM bank 8 does not exist"),
    ("ncc.psum.alloc(lambda idx, pdim_size, fdim_size: (0, 0, 64))", "must start at partition 0, byte 0"),
    ("ncc.sbuf.mod_alloc(base_addr=192 * 1024 - 128)", "does not fit the 196608 bytes of a partition"),
    ("ncc.sbuf.alloc(lambda idx, pdim_size, fdim_size: (32, 0))", "must start at partition 0, not 32"),
])
def test_placements_follow_the_direct_allocation_rules(fails, buffer, message):
    err = fails(HEADER + f"""
@nki.jit
def kernel(a):
    t = nl.ndarray((2, nl.par_dim(128), 64), dtype=nl.float32, buffer={buffer})  # ERR
    return a
""", np.zeros((1, 1), np.float32), error=HardwareRuleError)
    assert message in err.message


def test_an_allocation_function_must_return_a_location(fails):
    err = fails(HEADER + """
@nki.jit
def kernel(a):
    t = nl.ndarray((2, nl.par_dim(128), 64), dtype=nl.float32, buffer=ncc.sbuf.alloc(lambda **kw: 7))  # ERR
    return a
""", np.zeros((1, 1), np.float32), error=KernelUsageError)
    assert "(start_partition, byte_addr)" in err.message


def test_decorators_and_directives_are_accepted_and_force_auto_alloc_ignores_placements(run, rng):
    a = rng.standard_normal((512, 64)).astype(np.float32)
    body = ROTATING.replace("@nki.jit\n", "@ncc.enable_stack_allocator(log_level=20)\n"
                            "@ncc.skip_middle_end_transformations\n@nki.jit\n")
    body = body.replace("nl.affine_range(4)", "nl.sequential_range(4, directives=ncc.no_reorder())")
    both = run(body, a)
    np.testing.assert_allclose(both.out, 2 * a)
    assert both.kernel.options["skip_middle_end_transformations"] and both.kernel.options["stack_allocator"] == 20
    forced = run(ROTATING.replace("@nki.jit\n", "@ncc.force_auto_alloc\n@nki.jit\n"), a)
    assert all(t.placement is None for t in forced.traced.trace.tensors.values())


def test_an_allocation_in_a_traced_loop_is_placed_once(run, rng):
    # The legacy compiler traces an affine_range body once: an address counter advanced in the body
    # advances once (the public allocated-attention kernel relies on it); static_range unrolls.
    source = HEADER + """
@nki.jit
def kernel(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    address = 0
    for i in nl.{loop}(4):
        buf = nl.ndarray((nl.par_dim(128), 64), dtype=a.dtype, buffer=ncc.sbuf.mod_alloc(base_addr=address))
        address += 64 * 4
        buf[...] = nl.load(a[i * 128:(i + 1) * 128, :])
        nl.store(out[i * 128:(i + 1) * 128, :], value=buf)
    return out
"""
    a = rng.standard_normal((512, 64)).astype(np.float32)
    for loop, addresses in (("affine_range", [0, 0, 0, 0]), ("static_range", [0, 256, 512, 768])):
        both = run(source.replace("{loop}", loop), a)
        np.testing.assert_array_equal(both.out, a)
        placed = [t.placement[0][1] for t in both.traced.trace.tensors.values() if t.placement is not None]
        assert placed == addresses, loop


def test_blocks_on_one_physical_tile_hold_one_value_as_on_hardware(run, rng):
    # four logical blocks on two tiles, all loaded before any is read: blocks 0 and 1 are overwritten by
    # blocks 2 and 3 (the simulator holds the tiles as placed, as the model prices them)
    a = rng.standard_normal((512, 64)).astype(np.float32)
    both = run(HEADER + """
@nki.jit
def kernel(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    buf = nl.ndarray((4, nl.par_dim(128), 64), dtype=a.dtype,
                     buffer=ncc.sbuf.mod_alloc(base_addr=1024, num_free_tiles=(2,)))
    for i in nl.affine_range(4):
        buf[i] = nl.load(a[i * 128:(i + 1) * 128, :])
    for i in nl.affine_range(4):
        nl.store(out[i * 128:(i + 1) * 128, :], value=buf[i])
    return out
""", a)
    blocks = a.reshape(4, 128, 64)
    np.testing.assert_array_equal(both.out.reshape(4, 128, 64), blocks[[2, 3, 2, 3]])


# two query tiles accumulate in turn on one PSUM bank (the attention tutorial's v9/v10 do this): each
# block's `+=` starts its own group, then is copied out; ACCUMULATE_ALL keeps both groups open before reading
ONE_BANK = HEADER + """
@nki.jit
def kernel(s, m):
    out = nl.ndarray((2, 128, 128), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.ndarray((2, nl.par_dim(128), 128), dtype=nl.float32,
                     buffer=ncc.psum.mod_alloc(base_bank=7, num_bank_tiles=(1,)))
    for i in nl.sequential_range(2):
        for k in nl.affine_range(2):
            acc[i] += nisa.nc_matmul(nl.load(s[k]), nl.load(m[i, k]))
        nl.store(out[i], value=nl.copy(acc[i]))
    return out
"""
ACCUMULATE_ALL = ONE_BANK.replace("""        nl.store(out[i], value=nl.copy(acc[i]))
""", """    for i in nl.sequential_range(2):
        nl.store(out[i], value=nl.copy(acc[i]))
""")


def test_a_matmul_accumulating_onto_a_fresh_block_of_a_shared_tile_starts_its_group(run, rng):
    s = rng.standard_normal((2, 128, 128)).astype(np.float32)
    m = rng.standard_normal((2, 2, 128, 128)).astype(np.float32)
    expected = np.einsum("kpa,ikpb->iab", s, m)
    both = run(ONE_BANK, s, m)
    np.testing.assert_allclose(both.out, expected, rtol=1e-4, atol=1e-4)
    # still one memory: the second block's group overwrote the first's sums before they were read
    aliased = run(ACCUMULATE_ALL, s, m)
    np.testing.assert_allclose(aliased.out, expected[[1, 1]], rtol=1e-4, atol=1e-4)
