"""A trace-only timing replay follows the kernel's tape while the child is still recording it (measure.py
writes it in chunks, verdict.replay_while_recorded replays each chunk as it becomes whole): the same
instructions as the replay of the whole tape, a child that ends before its last chunk is a malformed
trace, and the profile is the one the whole tape gives."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future
from pathlib import Path

import numpy as np
import pytest

from accelopt_core.nki import TensorSpec, load_module
from accelopt_core.nki.loader import find_kernel
from accelopt_core.nki.replay import replay
from accelopt_core.nki.tape import assemble
from accelopt_core.profiling import SimulatorProfiler, TaskRef
from accelopt_core.profiling.handback import read_tape
from accelopt_core.profiling.measure import CHUNK_ENTRIES, Run, record
from accelopt_core.profiling.verdict import UnfinishedTapeError, replay_while_recorded

# one load, one multiply and one store per row block: more calls than one chunk holds
KERNEL = '''
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(x.shape[0] // 128):
        tile = nl.load(x[i * 128:(i + 1) * 128, :])
        nl.store(out[i * 128:(i + 1) * 128, :], value=nl.multiply(tile, 2.0))
    return out
'''
ROWS = 128 * 1000
SPECS = (TensorSpec((ROWS, 64), np.dtype(np.float32)),)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("recorded")
    recording = record(find_kernel(load_module(KERNEL, "kernel.py"), None), [Run(SPECS)], "trn1", str(folder))
    assert recording.error is None and recording.traces == ["tape-0.stream"]
    return folder / "tape-0.stream"


def written_slowly(source: Path, folder: Path, cut: int | None = None) -> Future[None]:
    """A stand-in child: writes `source` into `folder` a few kilobytes at a time (up to byte `cut`), then ends."""
    data = source.read_bytes()[:cut]
    ended: Future[None] = Future()

    def write() -> None:
        with open(folder / source.name, "wb") as handle:
            for start in range(0, len(data), 64 * 1024):
                handle.write(data[start:start + 64 * 1024])
                handle.flush()
                time.sleep(0.002)
        ended.set_result(None)

    threading.Thread(target=write, daemon=True).start()
    return ended


def test_the_tape_comes_in_chunks_that_join_into_the_whole_tape(recorded: Path) -> None:
    chunks = read_tape(str(recorded.parent), recorded.name)
    assert len(chunks) == 2 and len(chunks[0]["entries"]) == CHUNK_ENTRIES  # a chunk once it holds as many
    assert "format" in chunks[0] and "drops" in chunks[-1] and not any("drops" in c for c in chunks[:-1])
    whole = assemble(chunks)
    assert sum(entry[0] == "call" for entry in whole["entries"]) == 3000


def test_a_replay_following_the_recording_is_the_replay_of_the_whole_tape(recorded: Path, tmp_path: Path) -> None:
    followed, chunks = replay_while_recorded(str(tmp_path), 0, SPECS, written_slowly(recorded, tmp_path), "trn1",
                                             "kernel.py", 60.0)
    whole = replay(assemble(read_tape(str(recorded.parent), recorded.name)), SPECS, "trn1", numeric=False)
    assert len(followed.trace.instructions) == len(whole.trace.instructions) == 3000
    assert [(i.op, i.line, i.reads, i.writes) for i in followed.trace.instructions] == [
        (i.op, i.line, i.reads, i.writes) for i in whole.trace.instructions]
    assert assemble(chunks) == assemble(read_tape(str(recorded.parent), recorded.name))


def test_a_child_that_ends_before_its_last_chunk_leaves_a_malformed_trace(recorded: Path, tmp_path: Path) -> None:
    size = recorded.stat().st_size
    with pytest.raises(UnfinishedTapeError, match="ends before its last chunk"):
        replay_while_recorded(str(tmp_path), 0, SPECS, written_slowly(recorded, tmp_path, size // 2), "trn1",
                              "kernel.py", 60.0)


def test_a_trace_only_profile_is_timed_on_the_followed_replay(tmp_path: Path) -> None:
    reference = tmp_path / "ref.py"
    reference.write_text(f"import numpy as np\n\ndef get_inputs():\n    return [np.ones(({ROWS}, 64), np.float32)]\n\n"
                         "def forward(x):\n    return x + x\n")
    result = SimulatorProfiler().profile(KERNEL, TaskRef(reference=str(reference)), check=False)
    assert result.error is None and result.latency_ms and result.profile["instruction_count"] == 3000
    assert result.peak_work is not None and result.peak_work["vec_flops"] == ROWS * 64
