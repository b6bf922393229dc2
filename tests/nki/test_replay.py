"""The tape is the computation: the trusted side replays what it says with its own simulator, checks
every entry as it reaches it, and bounds what a forged tape can ask of it. (Every kernel of the other
nki tests also replays its recorded run bit for bit: conftest.run_both.)"""

from __future__ import annotations

import base64
import copy
import gc
import json
import tracemalloc
import zlib
from typing import Any

import numpy as np
import pytest
from calibration_set import ABSENT, calibration_cases

from accelopt_core.nki import HardwareRuleError, NkiError, TensorSpec, load_kernel, run_kernel
from accelopt_core.nki.replay import MAX_TILE_ELEMENTS, ReplayLimitError, ReplayLimits, replay
from accelopt_core.nki.tape import TAPE_VERSION, TapeError, TapeReader, tape_to_plain
from accelopt_core.nki.tensor import BufferPool
from accelopt_core.tasks import load_reference

HEADER = """
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
"""

EXP = HEADER + """
@nki.jit
def kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.exp(nl.load(x)))
    return out
"""


@pytest.fixture
def recorded(load):
    """record(source, *arrays) -> (the tape as JSON data, the kernel)."""

    def _record(source: str, *arrays: np.ndarray) -> tuple[dict[str, Any], Any]:
        _, kernel, _ = load(source)
        traced = run_kernel(kernel, [TensorSpec.of(a) for a in arrays], numeric=False, record=True)
        return json.loads(json.dumps(tape_to_plain(traced.trace))), kernel

    return _record


@pytest.fixture
def x(rng) -> np.ndarray:
    return rng.standard_normal((128, 64)).astype(np.float32)


def calls(tape: dict[str, Any]) -> list[list[Any]]:
    return [e for e in tape["entries"] if e[0] == "call"]


def test_an_edited_tape_computes_what_it_says(recorded, x) -> None:
    tape, _ = recorded(EXP, x)
    activation = next(c for c in calls(tape) if c[1] == "activation")
    activation[2]["op"] = "tanh"
    np.testing.assert_allclose(replay(tape, [x], "trn1", numeric=True).outputs[0], np.tanh(x), rtol=1e-6)


def test_a_tape_without_the_compute_gives_its_own_outputs(recorded, x) -> None:
    """Host code leaves no call on the tape: what is replayed is the copy the tape holds."""
    tape, _ = recorded(HEADER + """
@nki.jit
def kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.load(x))
    if x.storage.data is not None:
        out.storage.data[...] = 2 * x.storage.data
    return out
""", x)
    np.testing.assert_array_equal(replay(tape, [x], "trn1", numeric=True).outputs[0], x)


def test_a_compiler_generated_kernel_replays_bit_for_bit() -> None:
    """The public calibration set's add_rmsnorm_matmul, as the compiler wrote it: index expressions in
    every subscript, constants, reshaped inputs."""
    case = next((c for c in calibration_cases() if c["kernel"].endswith("/add_rmsnorm_matmul.py")), None)
    if case is None:
        pytest.skip(ABSENT)
    inputs = load_reference(case["reference"]).make_case(3).inputs
    kernel = load_kernel(case["kernel"])
    numeric = run_kernel(kernel, [np.array(a) for a in inputs])
    traced = run_kernel(kernel, [TensorSpec.of(a) for a in inputs], numeric=False, record=True)
    replayed = replay(json.loads(json.dumps(tape_to_plain(traced.trace))), inputs, "trn1", numeric=True)
    assert [o.tobytes() for o in replayed.outputs] == [o.tobytes() for o in numeric.outputs]


def test_a_block_tensor_of_nine_dimensions_replays(run, rng) -> None:
    """The calibration gqa_full allocates SBUF tensors of eight block dimensions and a partition one."""
    x = rng.standard_normal((128, 16)).astype(np.float32)
    both = run(HEADER + """
@nki.jit
def kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    blocks = nl.ndarray((1, 2, 1, 1, 2, 1, 1, 1, nl.par_dim(128), 16), dtype=x.dtype, buffer=nl.sbuf)
    blocks[0, 1, 0, 0, 1, 0, 0, 0] = nl.load(x)
    nl.store(out, value=nl.exp(blocks[0, 1, 0, 0, 1, 0, 0, 0]))
    return out
""", x)
    np.testing.assert_allclose(both.out, np.exp(x), rtol=1e-6)


def test_the_replay_runs_the_instructions_at_the_recorded_lines(recorded, x) -> None:
    tape, _ = recorded(EXP, x)
    replayed = replay(tape, [x], "trn1", numeric=False)
    assert [i.line for i in replayed.trace.instructions] == [7, 7, 7]
    assert replayed.outputs == [None]


def test_a_numeric_error_is_raised_at_the_recorded_line(recorded, rng) -> None:
    table = rng.standard_normal((200, 32)).astype(np.float32)
    rows = np.full((128, 1), 250, np.int32)
    tape, _ = recorded(HEADER + """
@nki.jit
def kernel(table, rows):
    out = nl.ndarray((128, 32), dtype=table.dtype, buffer=nl.shared_hbm)
    gathered = nl.load(table[nl.load(rows), nl.arange(32)[None, :]])
    nl.store(out, value=gathered)
    return out
""", table, rows)
    with pytest.raises(HardwareRuleError, match="indirect index 250") as caught:
        replay(tape, [table, rows], "trn1", numeric=True)
    assert caught.value.line == 7


def test_the_seeds_of_a_check_share_the_decoded_subscripts(recorded, rng) -> None:
    """The replays of one tape (a check's seeds) decode each tile reference once; each computes on its
    own inputs, bit for bit what a replay of its own gives."""
    x = rng.standard_normal((4, 128, 64)).astype(np.float32)
    source = HEADER + """
@nki.jit
def kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for b in nl.affine_range(x.shape[0]):
        i_p, i_f = nl.mgrid[0:128, 0:64]
        nl.store(out[b, i_p, i_f], value=nl.exp(nl.load(x[b, i_p, i_f])), mask=(i_f < 48))
    return out
"""
    tape, _ = recorded(source, x)
    reader = TapeReader(tape)
    reader.subscripts = {}
    first = replay(reader, [x], "trn1", numeric=True).outputs[0]
    decoded = dict(reader.subscripts)
    assert decoded
    other = rng.standard_normal(x.shape).astype(np.float32)
    again = replay(reader, [other], "trn1", numeric=True).outputs[0]
    assert reader.subscripts == decoded
    assert again.tobytes() == replay(TapeReader(tape), [other], "trn1", numeric=True).outputs[0].tobytes()
    assert first.tobytes() != again.tobytes()


def test_a_block_named_again_is_decoded_once(recorded, rng, monkeypatch) -> None:
    """Entries naming the same block of a tensor (a loop nest reads its blocks again and again) share one
    decoded subscript: the replay normalizes each distinct block once, and computes what it did before."""
    import accelopt_core.nki.replay as replay_module

    x = rng.standard_normal((2, 128, 64)).astype(np.float32)
    source = HEADER + """
@nki.jit
def kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for r in nl.affine_range(3):
        for b in nl.affine_range(x.shape[0]):
            nl.store(out[b, 0:128, 0:64], value=nl.exp(nl.load(x[b, 0:128, 0:64])))
    return out
"""
    tape, _ = recorded(source, x)
    decoded: list[Any] = []

    def counted(items: Any, dims: Any, name: str) -> Any:
        decoded.append(items)
        return normalize(items, dims, name)

    normalize = replay_module.normalize
    monkeypatch.setattr(replay_module, "normalize", counted)
    outputs = replay(tape, [x], "trn1", numeric=True).outputs
    assert len(decoded) == 2  # blocks 0 and 1 of a (2, 128, 64) tensor, x's and out's, each used three times
    assert outputs[0].tobytes() == np.exp(x).tobytes()


def test_an_overhang_names_its_own_tensor_however_often_it_is_named(recorded, rng) -> None:
    """A subscript running past its tensor is decoded for each tensor it is used on: its error names the tensor
    the instruction reads (shared by content, it would name the first)."""
    a = rng.standard_normal((100, 64)).astype(np.float32)
    source = HEADER + """
@nki.jit
def kernel(first, second):
    out = nl.ndarray((128, 64), dtype=first.dtype, buffer=nl.shared_hbm)
    i_p, i_f = nl.mgrid[0:128, 0:64]
    t = nl.load(first[i_p, i_f], mask=(i_p < 100))
    u = nl.load(second[i_p, i_f], mask=(i_p < 100))
    nl.store(out[i_p, i_f], value=nl.add(t, u), mask=(i_p < 100))
    return out
"""
    tape, _ = recorded(source, a, a)
    for call in calls(tape):
        if call[1] == "dma_copy" and call[2]["src"][1] == 2:
            call[2]["mask"] = None  # the second load's overhang is no longer masked off
    with pytest.raises(NkiError, match="second"):
        replay(tape, [a, a], "trn1", numeric=True)


def test_the_seeds_of_a_check_reuse_the_arrays_of_dropped_tensors(recorded, rng) -> None:
    """A tensor dropped by one replay lends its array to the next tensor of its size (refilled with NaN),
    and the outputs are bit for bit those of replays that allocate afresh."""
    x = rng.standard_normal((4, 128, 4096)).astype(np.float32)  # 2 MiB per block tensor
    source = HEADER + """
@nki.jit
def kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    first = nl.ndarray((4, nl.par_dim(128), 1024), dtype=x.dtype, buffer=nl.sbuf)
    for b in nl.affine_range(4):
        first[b] = nl.load(x[b, :, 0:1024])
    second = nl.ndarray((4, nl.par_dim(128), 1024), dtype=x.dtype, buffer=nl.sbuf)
    for b in nl.affine_range(4):
        second[b] = nl.exp(first[b])
        nl.store(out[b, :, 0:1024], value=second[b])
    return out
"""
    tape, _ = recorded(source, x)
    pool = BufferPool()
    fresh = [replay(tape, [x * seed], "trn1", numeric=True).outputs[0] for seed in (1, 2)]
    pooled = [replay(tape, [x * seed], "trn1", numeric=True, recycled=pool).outputs[0] for seed in (1, 2)]
    assert [o.tobytes() for o in pooled] == [o.tobytes() for o in fresh]
    assert pool.kept > 0 and pool.kept <= pool.ceiling


def test_a_buffer_pool_never_holds_more_than_the_most_held_live() -> None:
    pool = BufferPool()
    dims, dtype = (128, 4096), np.dtype(np.float32)
    size = 128 * 4096 * 4
    arrays = [pool.uninitialized(dims, dtype, live=size * (n + 1)) for n in range(3)]
    assert all(np.isnan(a).all() for a in arrays)
    for a in arrays:
        a[...] = 1.0
        pool.give(a)
    assert pool.kept == 3 * size
    again = pool.uninitialized(dims, dtype, live=size)
    assert np.isnan(again).all() and pool.kept == 2 * size
    pool.uninitialized((256, 4096), dtype, live=3 * size)  # another size: room is made for it
    assert pool.kept + 3 * size <= pool.ceiling
    pool.give(np.zeros(1024, np.float32))  # small arrays are the C heap's business
    assert pool.kept <= pool.ceiling


def test_indices_read_from_a_tile_are_each_replays_own(recorded, rng) -> None:
    table = rng.standard_normal((200, 32)).astype(np.float32)
    source = HEADER + """
@nki.jit
def kernel(table, rows):
    out = nl.ndarray((128, 32), dtype=table.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.load(table[nl.load(rows), nl.arange(32)[None, :]]))
    return out
"""
    rows = [rng.integers(0, 200, (128, 1)).astype(np.int32) for _ in range(2)]
    tape, _ = recorded(source, table, rows[0])
    reader = TapeReader(tape)
    reader.subscripts = {}
    for seed_rows in rows:
        gathered = replay(reader, [table, seed_rows], "trn1", numeric=True).outputs[0]
        np.testing.assert_array_equal(gathered, table[seed_rows[:, 0]])


def _nested(depth: int) -> list[Any]:
    value: list[Any] = ["tuple"]
    for _ in range(depth):
        value = ["tuple", value]
    return value


def _forged(tape: dict[str, Any], where: str, value: Any) -> dict[str, Any]:
    forged = copy.deepcopy(tape)
    if where == "version":
        forged["version"] = value
    elif where == "first call":
        calls(forged)[0][:] = value
    elif where == "append":
        forged["entries"].append(value)
    elif where == "remove return":
        forged["entries"] = [e for e in forged["entries"] if e[0] != "return"]
    elif where == "insert first":
        forged["entries"].insert(0, value)
    return forged


def _first_call(tape: dict[str, Any]) -> list[Any]:
    return copy.deepcopy(calls(tape)[0])


@pytest.mark.parametrize(("where", "change", "message"), [
    ("version", TAPE_VERSION + 1, "version"),
    ("first call", lambda c: [c[0], "__import__", *c[2:]], "not an instruction call"),
    ("first call", lambda c: [c[0], "dma_cpy", *c[2:]], "call of 'dma_cpy' is not an instruction call"),
    ("first call", lambda c: [*c[:5], c[5], c[6] + 1, c[7]], "emits 1 instructions; the tape says"),
    ("first call", lambda c: [*c[:7], True], "says the call of dma_copy at line 7 failed"),
    ("first call", lambda c: [c[0], c[1], {**c[2], "src": ["tile", 99]}, *c[3:]], "tensor 99 does not exist"),
    ("first call", lambda c: [c[0], c[1], {**c[2], "dtype": ["dtype", "object"]}, *c[3:]], "dtype 'object'"),
    ("first call", lambda c: [c[0], c[1], {**c[2], "dtype": "O"}, *c[3:]], "not a dtype NKI has"),
    ("first call", lambda c: [c[0], c[1], {**c[2], "evil": 1}, *c[3:]], "unexpected keyword"),
    ("first call", lambda c: [c[0], c[1], {**c[2], "mask": _nested(20)}, *c[3:]], "not a recorded value"),
    ("append", ["call", "memset", {}, 1, 0, 0, 0, False], "after the kernel returned"),
    ("append", ["open", "/etc/passwd"], "no recording writes"),
    ("remove return", None, "does not say what the kernel returned"),
    ("insert first", ["tensor", 1, "x", "hbm", "float32", [4], 0, None, 1, 0], "says tensor 1 where the replay"),
])
def test_a_forged_tape_stops_the_replay(recorded, x, where, change, message) -> None:
    tape, _ = recorded(EXP, x)
    value = change(_first_call(tape)) if callable(change) else change
    with pytest.raises((TapeError, NkiError), match=message):
        replay(_forged(tape, where, value), [x], "trn1", numeric=True)


@pytest.mark.parametrize(("expr", "table", "message"), [
    (["x", 5], [], "index expression 5 does not exist"),
    (["x", 0], [[[128, 1], 0, [2, 1]]], "term on an axis it does not have"),
    (["x", 0], [[[128, 1], "0", []]], "is not an index expression"),
    (["x", 0, 1], [[[128, 1], 0, []]], "is not an index expression"),
])
def test_a_forged_index_expression_stops_the_replay(recorded, x, expr, table, message) -> None:
    tape, _ = recorded(EXP, x)
    tape["exprs"] = table
    calls(tape)[0][2]["src"] = ["tile", calls(tape)[0][2]["src"][1], expr, expr]
    with pytest.raises(TapeError, match=message):
        replay(tape, [x], "trn1", numeric=True)


def test_a_dropped_tensor_cannot_be_used_again(recorded, x) -> None:
    tape, _ = recorded(EXP, x)
    entries = tape["entries"]
    drop = next(i for i, e in enumerate(entries) if e[0] == "drop" and e[1])
    entries.insert(drop + 1, ["drop", entries[drop][1]])
    with pytest.raises(TapeError, match="does not exist"):
        replay(tape, [x], "trn1", numeric=True)


def test_inputs_must_be_the_kernels(recorded, x) -> None:
    tape, _ = recorded(EXP, x)
    with pytest.raises(TapeError, match="float32\\[128, 64\\], the kernel's is float32\\[64, 128\\]"):
        replay(tape, [x.T.copy()], "trn1", numeric=True)
    with pytest.raises(TapeError, match="declares 1 array inputs; the kernel has 2"):
        replay(tape, [x, x], "trn1", numeric=True)


def test_a_tape_cannot_ask_for_more_memory_than_the_budget(recorded, x) -> None:
    tape, _ = recorded(EXP, x)
    huge = ["tensor", 2, "huge", "hbm", "float32", [2**20, 2**20], 0, None, 1, 0]
    entries = tape["entries"]
    entries[next(i for i, e in enumerate(entries) if e[0] == "tensor")] = huge
    with pytest.raises(ReplayLimitError, match="more than 1024 MiB"):
        replay(tape, [x], "trn1", numeric=True, limits=ReplayLimits(memory_bytes=2**30))


def test_a_tape_cannot_take_longer_than_the_limit(recorded, x) -> None:
    tape, _ = recorded(EXP, x)
    with pytest.raises(ReplayLimitError, match="within 0 s"):
        replay(tape, [x], "trn1", numeric=True, limits=ReplayLimits(seconds=0))


def test_no_operand_is_larger_than_an_instruction_handles(recorded, x) -> None:
    tape, _ = recorded(EXP, x)
    load = calls(tape)[0]
    side = 2**15
    tape["exprs"].append([[side, side], 0, []])
    huge = ["x", len(tape["exprs"]) - 1]
    load[2]["src"] = ["tile", 1, huge, huge]
    assert side * side > MAX_TILE_ELEMENTS
    with pytest.raises(TapeError, match="larger than any instruction handles"):
        replay(tape, [x], "trn1", numeric=True)


def test_an_array_must_be_the_size_it_declares(recorded, rng) -> None:
    """A compressed array that inflates past its declared size (a zip bomb) is refused."""
    x = rng.standard_normal((128, 64)).astype(np.float32)
    tape, _ = recorded(HEADER + """
@nki.jit
def kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    i_p, i_f = nl.mgrid[0:128, 0:64]
    nl.store(out, value=nl.load(x, mask=(i_f < 32)), mask=(i_f < 32))
    return out
""", x)
    assert tape["arrays"]
    dtype, shape, _ = tape["arrays"][0]
    tape["arrays"][0] = [dtype, shape, base64.b64encode(zlib.compress(b"\0" * 2**26)).decode()]
    with pytest.raises(TapeError, match="is not 8192 bytes"):
        replay(tape, [x], "trn1", numeric=True)


def test_only_the_replays_spend_their_time_budget(recorded, x, monkeypatch) -> None:
    """The trusted side's own work between two cases' replays (a full-size reference can take minutes)
    does not count against the kernel's replay budget; the replays' own time does."""
    from types import SimpleNamespace

    from accelopt_core.nki.runner import Launch
    from accelopt_core.profiling import verdict
    from accelopt_core.profiling.profiler import ready

    tape, _ = recorded(EXP, x)
    clock = [0.0]
    monkeypatch.setattr(verdict.time, "monotonic", lambda: clock[0])
    plan = verdict.plan_runs([[TensorSpec.of(x)]] * 2, Launch(), [TensorSpec.of(x)], Launch())
    replays = verdict.Replays([tape], plan, "trn1", "kernel.py", seconds=5.0, memory_bytes=2**30)
    cases = [ready(SimpleNamespace(inputs=[x])), ready(SimpleNamespace(inputs=[x]))]
    for outputs in replays.outputs(cases):
        np.testing.assert_allclose(outputs[0], np.exp(x), rtol=1e-6)
        clock[0] += 60.0  # the reference and the comparison, between replays
    assert replays.seconds_left == 5.0


def test_a_finished_replay_leaves_no_garbage_for_the_collector(recorded, x) -> None:
    """Its tensors are freed when it ends, not when the collector next runs: the profiler pauses the
    collector while it concludes, and a numeric replay's tensors are gigabytes at full size."""
    tape, _ = recorded(EXP, x)
    gc.collect()
    gc.disable()
    try:
        replay(tape, [x], "trn1", numeric=True)
        left = [o for o in gc.get_objects() if type(o).__name__ in ("_Replay", "Simulation")]
    finally:
        gc.enable()
    assert left == []


REVERSED = HEADER + """
@nki.jit
def kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    i_p, i_f = nl.arange(128)[:, None], nl.arange(2048)[None, :]
    nl.store(out, value=nl.load(x[127 - i_p, 2047 - i_f]))
    return out
"""

SHEARED = HEADER + """
@nki.jit
def kernel(x):
    out = nl.ndarray((128, 128), dtype=x.dtype, buffer=nl.shared_hbm)
    i_p, i_f = nl.arange(128)[:, None], nl.arange(128)[None, :]
    nl.store(out, value=nl.load(x[i_p, i_p + i_f]))
    return out
"""


def test_a_copy_with_every_dimension_reversed_is_a_view_not_a_gather(recorded, rng) -> None:
    """Its index arrays (eight bytes an element per dimension) took the parent to 1.75 GiB under
    a 512 MiB budget; reversed axes are negative strides of a view, with nothing to count."""
    x = rng.standard_normal((128, 2048)).astype(np.float32)
    tape, _ = recorded(REVERSED, x)
    tensors = 3 * x.nbytes  # the input, the loaded tile, the output
    tracemalloc.start()
    try:
        result = replay(tape, [x], "trn1", numeric=True, limits=ReplayLimits(memory_bytes=tensors))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    np.testing.assert_array_equal(result.outputs[0], x[::-1, ::-1])
    assert peak < tensors + x.nbytes // 2, peak  # its two index arrays are 4 times the input


def test_a_gather_s_index_arrays_count_against_the_memory_budget(recorded, rng) -> None:
    """A subscript no view can serve is gathered: its index arrays are held against the budget meanwhile."""
    x = rng.standard_normal((128, 256)).astype(np.float32)
    tape, _ = recorded(SHEARED, x)
    tensors = x.nbytes + 2 * 128 * 128 * 4  # the input, the loaded tile, the output
    gather = 128 * 128 * (2 * 8 + 2 + 4)  # two index arrays, a mask's byte or two, the elements
    with pytest.raises(ReplayLimitError, match="ran out of memory"):
        replay(tape, [x], "trn1", numeric=True, limits=ReplayLimits(memory_bytes=tensors + gather // 2))
    rows = np.arange(128)[:, None] + np.arange(128)[None, :]
    result = replay(tape, [x], "trn1", numeric=True, limits=ReplayLimits(memory_bytes=tensors + gather))
    np.testing.assert_array_equal(result.outputs[0], x[np.arange(128)[:, None], rows])


def test_a_replay_may_borrow_its_inputs_and_copies_one_it_writes(recorded, rng) -> None:
    """Allowed to borrow them (a seed worker: the reference runs after the replay), a replay reads the caller's
    input arrays where they are (no copy of gigabytes the kernel only loads from) and never writes them: a
    kernel that stores into its input writes the replay's own copy of it. Not allowed, it copies them (a
    reference running beside the replay may write its inputs)."""
    x = rng.standard_normal((128, 8192)).astype(np.float32)  # 4 MiB
    tape, _ = recorded(HEADER + """
@nki.jit
def kernel(x):
    out = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.exp(nl.load(x[:, 0:64])))
    return out
""", x)
    peaks = []
    for borrow in (True, False):
        tracemalloc.start()
        try:
            outputs = replay(tape, [x], "trn1", numeric=True, borrow_inputs=borrow).outputs
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
        np.testing.assert_array_equal(outputs[0], np.exp(x[:, :64]))
    assert peaks[0] < x.nbytes / 4 < x.nbytes < peaks[1]
    tape, _ = recorded(HEADER + """
@nki.jit
def kernel(x):
    nl.store(x[:, 0:64], value=nl.exp(nl.load(x[:, 0:64])))
    return x
""", x)
    before = x.copy()
    written = replay(tape, [x], "trn1", numeric=True, borrow_inputs=True).outputs[0]
    np.testing.assert_array_equal(x, before)
    np.testing.assert_array_equal(written[:, :64], np.exp(before[:, :64]))
    np.testing.assert_array_equal(written[:, 64:], before[:, 64:])


def test_a_result_written_in_part_holds_fresh_memory_elsewhere(recorded, rng) -> None:
    """An instruction's fresh result is filled only when it is not written whole: the elements a mask left
    out read as never-written memory (NaN), the others as computed."""
    x = rng.standard_normal((128, 64)).astype(np.float32)
    tape, _ = recorded(HEADER + """
@nki.jit
def kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    y = nl.exp(nl.load(x), mask=(i_p < 32))
    nl.store(out, value=nl.copy(y))
    return out
""", x)
    out = replay(tape, [x], "trn1", numeric=True).outputs[0]
    np.testing.assert_array_equal(out[:32], np.exp(x[:32]))
    assert np.isnan(out[32:]).all()


def test_psum_accumulation_rounds_each_matmul_s_sum_to_float32(recorded, rng) -> None:
    """`acc += nc_matmul(...)` over K steps is float32 after every step, as on the Tensor engine: the
    replay's sum is bit for bit the float32 running sum of the steps' float32 products."""
    a = rng.standard_normal((512, 128)).astype(np.float32)
    b = rng.standard_normal((512, 256)).astype(np.float32)
    tape, _ = recorded(HEADER + """
import neuronxcc.nki.isa as nisa

@nki.jit
def kernel(a, b):
    out = nl.ndarray((128, 256), dtype=a.dtype, buffer=nl.shared_hbm)
    acc = nl.zeros((128, 256), dtype=nl.float32, buffer=nl.psum)
    for k in nl.affine_range(4):
        acc += nisa.nc_matmul(nl.load(a[k * 128:(k + 1) * 128, :]), nl.load(b[k * 128:(k + 1) * 128, :]))
    nl.store(out, value=nl.copy(acc))
    return out
""", a, b)
    expected = np.zeros((128, 256), np.float32)
    for k in range(4):
        expected = expected + a[k * 128:(k + 1) * 128].T @ b[k * 128:(k + 1) * 128]
    assert replay(tape, [a, b], "trn1", numeric=True).outputs[0].tobytes() == expected.tobytes()


def test_an_output_tensor_is_handed_over_and_a_tensor_returned_twice_is_copied(recorded, x) -> None:
    """The replay hands its whole output tensor's array to the caller (a full-size output is hundreds of
    megabytes to copy); a tensor returned twice comes back as two arrays that do not share memory."""
    wide = np.tile(x, (1, 128))  # 128 x 8192: 4 MiB
    tape, _ = recorded(HEADER + """
@nki.jit
def kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for c in nl.affine_range(16):
        nl.store(out[:, c * 512:(c + 1) * 512], value=nl.exp(nl.load(x[:, c * 512:(c + 1) * 512])))
    return out
""", wide)
    tracemalloc.start()
    try:
        outputs = replay(tape, [wide], "trn1", numeric=True, borrow_inputs=True).outputs
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    np.testing.assert_array_equal(outputs[0], np.exp(wide))
    assert peak < 1.5 * wide.nbytes  # the output once, not the tensor and a copy of it
    tape, _ = recorded(HEADER + """
@nki.jit
def kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.exp(nl.load(x)))
    return out, out
""", x)
    first, second = replay(tape, [x], "trn1", numeric=True).outputs
    np.testing.assert_array_equal(first, np.exp(x))
    np.testing.assert_array_equal(second, np.exp(x))
    assert not np.shares_memory(first, second)


def test_a_tile_loaded_from_a_borrowed_input_is_copied_when_written(recorded, rng) -> None:
    """A load of a borrowed input reads it where it is; writing part of the loaded tile writes the tile's own
    copy, never the caller's array."""
    x = rng.standard_normal((128, 64)).astype(np.float32)
    tape, _ = recorded(HEADER + """
@nki.jit
def kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    tile = nl.load(x)
    tile[0:32, :] = nl.exp(tile[0:32, :])
    nl.store(out, value=tile)
    return out
""", x)
    before = x.copy()
    out = replay(tape, [x], "trn1", numeric=True, borrow_inputs=True).outputs[0]
    np.testing.assert_array_equal(x, before)
    np.testing.assert_array_equal(out[:32], np.exp(before[:32]))
    np.testing.assert_array_equal(out[32:], before[32:])
