"""Large block tensors held block by block in a numeric replay (accelopt_core/nki/blocks.py): the same
outputs bit for bit, blocks filled as fresh memory before their first instruction and given back after
their last. (tests/nki/conftest.py replays every kernel of these tests both ways too.)"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from accelopt_core.nki import TensorSpec, load_kernel, run_kernel
from accelopt_core.nki.blocks import BlockLiveness, LiveBlocks, _Mapped
from accelopt_core.nki.replay import declares_block_tensors
from accelopt_core.nki.tape import TapeReader, tape_to_plain

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "rules"))
from kernel_styles import KERNELS, SHAPES

COMPILER_STYLE = [name for name in SHAPES if name.startswith("compiler_")]


@pytest.mark.parametrize("name", COMPILER_STYLE)
def test_compiler_style_kernels_replay_block_by_block_bit_for_bit(name: str, run_file, rng) -> None:
    arrays = [rng.standard_normal(shape, dtype=np.float32) for shape in SHAPES[name]]
    both = run_file(str(KERNELS / f"{name}.py"), *arrays)  # compares the replays, whole and by block
    assert BlockLiveness.of(both.traced.trace, smallest=1) is not None


def test_a_psum_block_lives_from_its_matmul_to_the_copy_that_reads_it_out(rng) -> None:
    """compiler_matmul: each block of the transposes' PSUM tensor v8 is zeroed by nl.zeros' memset, written by
    a matmul and read by the copy after it (whose write the assignment retargets into v9): its last."""
    trace = run_kernel(load_kernel(str(KERNELS / "compiler_matmul.py")),
                       [TensorSpec(s, np.dtype(np.float32)) for s in SHAPES["compiler_matmul"]], numeric=False).trace
    liveness = BlockLiveness.of(trace, smallest=1)
    assert liveness is not None
    v8 = next(t for t in trace.tensors.values() if t.name == "11.4").id
    first = {block: index for index, pairs in liveness.first.items() for tensor, block in pairs if tensor == v8}
    last = {block: index for index, pairs in liveness.last.items() for tensor, block in pairs if tensor == v8}
    assert sorted(first) == sorted(last) == [0, 1, 2, 3]
    for block in first:
        zeroed, reader = trace.instructions[first[block]], trace.instructions[last[block]]
        writer = trace.instructions[reader.index - 1]
        assert zeroed.op == "memset" and writer.op == "nc_transpose" and [w.tensor for w in writer.writes] == [v8]
        assert [a.tensor for a in reader.reads] == [v8] and v8 not in [w.tensor for w in reader.writes]


def test_a_block_given_back_hands_its_memory_to_the_next_block() -> None:
    mapped = _Mapped((4, 128, 1024), np.dtype(np.float32), blocks=4)
    mapped.place(0, 1.0)
    mapped.place(1, 2.0)
    mapped.array[0, 0, 0] = 7.0
    mapped.release(0)
    mapped.place(2, np.nan)  # into the slot block 0 had: filled as fresh memory
    assert mapped.slots == 2
    assert np.isnan(mapped.array[2]).all() and (mapped.array[1] == 2.0).all()


def test_blocks_that_do_not_start_on_a_page_are_held_whole() -> None:
    assert _Mapped.fits((4, 128, 1024), np.dtype(np.float32), 4)
    assert not _Mapped.fits((4, 128, 3), np.dtype(np.float32), 4)


def test_a_psum_tensor_is_held_by_block_only_if_its_written_flags_start_on_pages_too() -> None:
    """A [128, 456] float32 block is 57 pages, its one-byte PSUM written-flags are 58,368 bytes: that
    tensor is held whole (mapping such a flags block fails with EINVAL), the same one in SBUF by block."""
    live = LiveBlocks(BlockLiveness(frozenset({1}), {}, {}))
    dims, f32 = (12, 32, 2, 128, 456), np.dtype(np.float32)
    assert live.takes(1, dims, 3, f32, "sbuf")
    assert not live.takes(1, dims, 3, f32, "psum")
    assert live.takes(1, (12, 32, 2, 128, 512), 3, f32, "psum")


def test_only_tapes_with_large_block_tensors_are_replayed_by_block() -> None:
    traced = run_kernel(load_kernel(str(KERNELS / "compiler_matmul.py")),
                        [TensorSpec(s, np.dtype(np.float32)) for s in SHAPES["compiler_matmul"]],
                        numeric=False, record=True)
    reader = TapeReader(json.loads(json.dumps(tape_to_plain(traced.trace))))
    assert not declares_block_tensors(reader)  # its largest block tensor is 2 MiB
    assert declares_block_tensors(reader, smallest=1 << 20)
