"""Results come back from a kernel's child as plain data: JSON (its traces) and, from a device, .npy
arrays loaded without pickle, every dtype exact, every name, path and shape checked; anything else is
one failed evaluation."""

from __future__ import annotations

import json
import os
import pickle
import time
import tracemalloc
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from accelopt_core.nki import dtypes
from accelopt_core.nki.replay import ReplayLimitError
from accelopt_core.profiling import SandboxLimits, SimulatorProfiler, TaskRef
from accelopt_core.profiling.handback import (
    DTYPES,
    MalformedResultError,
    ParseBudget,
    TapeFile,
    TapeFollower,
    check_tape_names,
    load_array,
    open_job_file,
    parsed_size_bound,
    read_job_file,
    read_result,
    read_tape,
    save_array,
    write_result,
)
from accelopt_core.profiling.measure import Recording


@pytest.mark.parametrize("name", sorted(DTYPES))
def test_every_dtype_comes_back_exact(tmp_path: Path, name: str) -> None:
    dtype = DTYPES[name]
    values = np.arange(-6, 6, dtype=np.float32).reshape(3, 4) / 2
    array = values.astype(dtype) if name != "bool" else values > 0
    write_result(str(tmp_path), {"outputs": [[save_array(str(tmp_path), "out-0-0.npy", array)]]})
    back = read_result(str(tmp_path))["outputs"][0][0]
    assert back.dtype == dtype and back.shape == array.shape
    assert back.tobytes() == np.ascontiguousarray(array).tobytes()


def test_a_strided_view_is_stored_as_its_values(tmp_path: Path) -> None:
    array = np.arange(64, dtype=np.float32).reshape(8, 8).astype(dtypes.bfloat16)[::2, 1::3]
    descriptor = save_array(str(tmp_path), "out-0-0.npy", array)
    assert np.array_equal(load_array(str(tmp_path), descriptor).astype(np.float32), array.astype(np.float32))


def test_an_output_of_another_dtype_is_refused_in_the_child(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="cannot be checked"):
        save_array(str(tmp_path), "out-0-0.npy", np.zeros(2, dtype=np.complex64))


def _descriptor(tmp_path: Path, **changes: object) -> dict:
    descriptor = save_array(str(tmp_path), "out-0-0.npy", np.ones((2, 3), dtype=np.float32))
    return {**descriptor, **changes}


@pytest.mark.parametrize("changes", [
    {"file": "../out-0-0.npy"}, {"file": "/etc/passwd"}, {"file": "result.json"}, {"dtype": "object"},
    {"dtype": "float16"}, {"shape": [3, 2]}, {"shape": [2, -3]}, {"shape": "2x3"}, {"extra": 1}])
def test_a_forged_descriptor_is_malformed(tmp_path: Path, changes: dict) -> None:
    with pytest.raises(MalformedResultError):
        load_array(str(tmp_path), _descriptor(tmp_path, **changes))


def test_a_pickled_array_or_a_link_is_malformed(tmp_path: Path) -> None:
    descriptor = _descriptor(tmp_path)
    np.save(tmp_path / "out-0-0.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(MalformedResultError, match=r"holds object"):  # its header is read, never its pickle
        load_array(str(tmp_path), descriptor)
    (tmp_path / "out-0-0.npy").unlink()
    outside = tmp_path.parent / "elsewhere.npy"
    np.save(outside, np.ones((2, 3), dtype=np.uint32))
    (tmp_path / "out-0-0.npy").symlink_to(outside)
    with pytest.raises(MalformedResultError, match="not a plain file"):
        load_array(str(tmp_path), descriptor)


def test_result_json_must_be_plain_and_typed(tmp_path: Path) -> None:
    (tmp_path / "result.json").write_text("[" * 100_000)
    with pytest.raises(MalformedResultError):
        read_result(str(tmp_path))
    (tmp_path / "result.json").write_text(json.dumps({"traces": [], "error": 3}))
    with pytest.raises(MalformedResultError, match="error is a int"):
        Recording.from_plain(read_result(str(tmp_path)))
    (tmp_path / "result.json").write_text(json.dumps({"traces": [{"file": "trace-0.json"}]}))
    with pytest.raises(MalformedResultError, match="not text"):
        Recording.from_plain(read_result(str(tmp_path)))


def test_a_tape_file_is_chunks_of_plain_json_the_worker_named(tmp_path: Path) -> None:
    stream = TapeFile(str(tmp_path), 0)
    stream.write({"format": "accelopt-trace"})
    stream.write({"entries": [["program"]]})
    stream.close()
    assert read_tape(str(tmp_path), stream.name) == [{"format": "accelopt-trace"}, {"entries": [["program"]]}]
    for forged in ("../tape-0.stream", "/etc/passwd", "result.json", "tape-0.stream/..", "trace-0.json", 7):
        with pytest.raises(MalformedResultError, match="not one the worker writes"):
            read_tape(str(tmp_path), forged)
    for name, text in (("tape-1.stream", "5\n" + "[" * 5), ("tape-2.stream", "[" * 100_000),
                       ("tape-3.stream", "99\n[1]"), ("tape-4.stream", "-3\n[1]")):
        (tmp_path / name).write_text(text)
        with pytest.raises(MalformedResultError, match=r"not JSON|does not start with its length|ends inside"):
            read_tape(str(tmp_path), name)
    (tmp_path / "tape-5.stream").symlink_to(tmp_path / stream.name)
    with pytest.raises(MalformedResultError, match="not a plain file"):
        read_tape(str(tmp_path), "tape-5.stream")


def test_a_tape_is_read_chunk_by_chunk_as_it_is_written(tmp_path: Path) -> None:
    """The trusted side sees each chunk once it is whole, and keeps what it read."""
    follower = TapeFollower(str(tmp_path), "tape-0.stream")
    assert follower.poll() == []  # not written yet
    path = tmp_path / "tape-0.stream"
    with open(path, "wb") as handle:
        handle.write(b'10\n{"a": [1]')
        handle.flush()
        assert follower.poll() == [] and not follower.whole_chunks()
        handle.write(b'}8\n{"b": 2')
        handle.flush()
        assert follower.poll() == [{"a": [1]}]
        handle.write(b"}")
    assert follower.poll() == [{"b": 2}] and follower.whole_chunks()
    path.write_bytes(b"2\n[]")  # written over: what was read stays
    assert follower.chunks == [{"a": [1]}, {"b": 2}]


def test_a_fifo_in_place_of_any_file_is_refused_without_blocking(tmp_path: Path) -> None:
    """The tape follower once checked the name, then opened it: a FIFO swapped in between held the parent
    in open() forever. Each file is opened without blocking and checked on its descriptor."""
    descriptor = save_array(str(tmp_path), "out-0-0.npy", np.ones((2, 3), dtype=np.float32))
    for name in ("tape-0.stream", "result.json", "out-0-0.npy", "summary.json"):
        path = tmp_path / name
        path.unlink(missing_ok=True)
        os.mkfifo(path)
    with ThreadPoolExecutor(1) as pool:
        attempts = [pool.submit(TapeFollower(str(tmp_path), "tape-0.stream").poll),
                    pool.submit(read_result, str(tmp_path)), pool.submit(load_array, str(tmp_path), descriptor),
                    pool.submit(open_job_file, str(tmp_path / "summary.json"))]
        for attempt in attempts:
            with pytest.raises(MalformedResultError, match="not a plain file"):
                attempt.result(timeout=5)


def test_an_array_file_must_hold_exactly_the_bytes_its_header_says(tmp_path: Path) -> None:
    descriptor = _descriptor(tmp_path)
    with open(tmp_path / "out-0-0.npy", "ab") as handle:
        handle.write(b"\0" * 4)
    with pytest.raises(MalformedResultError, match="elements its header says"):
        load_array(str(tmp_path), descriptor)


def test_a_job_file_is_read_up_to_its_limit_only(tmp_path: Path) -> None:
    (tmp_path / "result.json").write_bytes(b" " * 100)
    assert read_job_file(str(tmp_path / "result.json"), 100) == b" " * 100
    with pytest.raises(MalformedResultError, match="larger than 99 bytes"):
        read_job_file(str(tmp_path / "result.json"), 99)


class _Payload:
    """Unpickling this makes a folder: the proof that the parent ran code the kernel chose."""

    def __init__(self, canary: Path) -> None:
        self.canary = canary

    def __reduce__(self) -> tuple:
        return (os.mkdir, (str(self.canary),))


def _writes_from_the_kernel(statements: str) -> str:
    """A silu kernel that, once it has computed, leaves its own files in the job folder and exits."""
    from accelopt_core.tasks.registry import task_files

    source = Path(task_files("silu").kernel).read_text()
    body = "".join(f"    {line}\n" for line in statements.splitlines())
    marker = "    rows, cols = x.shape\n"
    return source.replace(marker, body + marker)


@pytest.fixture(scope="module")
def profiler() -> SimulatorProfiler:
    return SimulatorProfiler(seeds=1, check_variant="small", limits=SandboxLimits(seconds=30, memory_mb=2048))


def test_a_planted_pickle_is_never_loaded(profiler: SimulatorProfiler, tmp_path: Path) -> None:
    canary = tmp_path / "unpickled"
    payload = pickle.dumps(_Payload(canary))
    kernel = _writes_from_the_kernel(f"import os\nopen('result.pkl', 'wb').write({payload!r})\n"
                                     f"open('result.json', 'w').write('{{}}')\nos._exit(0)")
    result = profiler.profile(kernel, TaskRef("silu"))
    assert not canary.exists()
    assert result.correct is not True and result.latency_ms is None


def test_a_forged_result_file_is_one_failed_evaluation(profiler: SimulatorProfiler) -> None:
    forged = json.dumps({"outputs": [[{"file": "../../etc/passwd", "dtype": "float32", "shape": [1]}]],
                         "report": {"latency_ms": 1e-6}, "facts": {}})
    kernel = _writes_from_the_kernel(f"import os\nopen('result.json', 'w').write({forged!r})\nos._exit(0)")
    result = profiler.profile(kernel, TaskRef("silu"))
    assert result.error and "malformed result" in result.error and result.correct is not True


def test_a_result_naming_one_tape_many_times_is_refused_before_any_is_read(profiler: SimulatorProfiler) -> None:
    """The same tape named six times was parsed six times before the count was compared."""
    forged = json.dumps({"traces": ["tape-0.stream"] * 6})
    kernel = _writes_from_the_kernel(f"import os\nopen('result.json', 'w').write({forged!r})\nos._exit(0)")
    result = profiler.profile(kernel, TaskRef("silu"))
    assert result.error and "names the tapes [tape-0.stream, tape-0.stream" in result.error


def test_the_tape_names_are_the_runs_in_order_each_once() -> None:
    check_tape_names(["tape-0.stream", "tape-1.stream"], 2)
    for names in (["tape-0.stream"], ["tape-1.stream", "tape-0.stream"], ["tape-0.stream"] * 2, []):
        with pytest.raises(MalformedResultError, match="not the 2 of its runs"):
            check_tape_names(names, 2)


def test_a_tape_of_empty_entries_is_refused_before_it_is_parsed(tmp_path: Path) -> None:
    """127 MB of empty entries took the parent to 4.2 GB before the entry limit refused them.
    The parsed size is bounded from the text and charged to the evaluation's budget first."""
    body = b'{"entries":[' + b",".join([b"[]"] * 2_000_000) + b"]}"
    (tmp_path / "tape-0.stream").write_bytes(b"%d\n" % len(body) + body)
    tracemalloc.start()
    try:
        with pytest.raises(ReplayLimitError, match="more than 64 MiB"):
            read_tape(str(tmp_path), "tape-0.stream", ParseBudget(64 * 2**20))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 * len(body)  # the bytes read, never their parsed lists (about 100 MB here)


def test_a_chunk_declaring_more_than_the_budget_is_refused_unread(tmp_path: Path) -> None:
    (tmp_path / "tape-0.stream").write_bytes(b"99999999\n[")
    with pytest.raises(ReplayLimitError, match="memory limit"):
        read_tape(str(tmp_path), "tape-0.stream", ParseBudget(2**20))


def test_reading_a_tape_past_the_kernel_s_deadline_stops_as_our_limit(tmp_path: Path) -> None:
    stream = TapeFile(str(tmp_path), 0)
    stream.write({"format": "accelopt-trace"})
    stream.close()
    with pytest.raises(ReplayLimitError, match="did not finish within its time limit"):
        read_tape(str(tmp_path), stream.name, deadline=time.monotonic() - 1)
    assert read_tape(str(tmp_path), stream.name, deadline=time.monotonic() + 60) == [{"format": "accelopt-trace"}]


def test_the_parsed_size_bound_holds_for_every_kind_of_json(tmp_path: Path) -> None:
    texts = [b"[" + b",".join([b"[]"] * 50_000) + b"]", b"[" + b",".join([b"{}"] * 50_000) + b"]",
             json.dumps([f"s{i}" for i in range(50_000)]).encode(), json.dumps([i / 7 for i in range(50_000)]).encode(),
             json.dumps([[i, [i + 1.5, {"k": i}]] for i in range(20_000)]).encode()]
    for text in texts:
        tracemalloc.start()
        try:
            parsed = json.loads(text)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert parsed and peak <= parsed_size_bound(text), text[:20]


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float8_e4m3", "float8_e5m2", "int32"])
def test_a_sandboxed_kernel_of_each_dtype_is_checked(tmp_path: Path, dtype: str) -> None:
    """The whole way: a kernel computing in `dtype` in the sandbox, judged on its exact outputs."""
    reference = tmp_path / "double.py"
    reference.write_text(
        "import numpy as np\nfrom accelopt_core.nki import dtypes\n\n"
        f"def make_inputs(rng):\n    values = rng.integers(-4, 4, (128, 8)) / 2\n"
        f"    return [values.astype(dtypes.as_dtype({dtype!r}))]\n\n"
        "def reference(x):\n    return x.astype(np.float32) * 2\n")
    kernel = ("import neuronxcc.nki as nki\nimport neuronxcc.nki.language as nl\n\n"
              "@nki.jit\ndef kernel(x):\n    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)\n"
              "    t = nl.load(x)\n    nl.store(out, value=nl.add(t, t, dtype=x.dtype))\n    return out\n")
    result = SimulatorProfiler(seeds=1).profile(kernel, TaskRef(reference=str(reference)))
    assert result.ok, result.error
    assert result.correct is True, result.check_message
