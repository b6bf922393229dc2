"""Kernels that try to win their verdict from inside their own process gain nothing (README, "Kernel isolation").

The sandboxed child only records the kernel's traces; the trusted parent replays them on its own
inputs, judges the outputs and times the replay's trace. Each kernel here is the silu (or matmul)
baseline with one attack added; none of them gets `correct: true` with a lower latency than the honest
kernel, at the size the search checks (small) or at the size it times (where the search verifies
every kernel it keeps).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from accelopt_core.profiling import SandboxLimits, SimulatorProfiler, TaskRef
from accelopt_core.profiling.result import ProfileResult
from accelopt_core.tasks.registry import task_files

SILU = Path(task_files("silu").kernel).read_text()
MATMUL = Path(task_files("matmul").kernel).read_text()
START = "    rows, cols = x.shape\n"  # the first line of the silu kernel's body
RETURN = "    return out\n"
HONEST = ("            denominator = nl.add(nl.exp(nl.negative(tile)), 1.0)\n"
          "            result = nl.divide(tile, denominator)\n")
CHEAP = "            result = nl.multiply(tile, 0.5)\n"  # one instruction, the wrong answer


def at_start(statements: str, source: str = SILU) -> str:
    return source.replace(START, _indented(statements) + START)


def before_return(statements: str, source: str = SILU, marker: str = RETURN) -> str:
    return source.replace(marker, _indented(statements) + marker)


def _indented(statements: str) -> str:
    return "".join(f"    {line}\n" for line in statements.strip("\n").splitlines())


@pytest.fixture(scope="module")
def checked_small() -> SimulatorProfiler:
    """The search's profiler: checks on the small variant, times at full size."""
    return SimulatorProfiler(seeds=1, check_variant="small", limits=SandboxLimits(seconds=120, memory_mb=4096))


@pytest.fixture(scope="module")
def checked_timed(checked_small: SimulatorProfiler) -> SimulatorProfiler:
    """How the search verifies a kernel it keeps: checked at the size it is timed."""
    verifier = checked_small.at_timed_size()
    assert verifier is not None
    return verifier


@pytest.fixture(scope="module")
def honest(checked_small: SimulatorProfiler) -> ProfileResult:
    result = checked_small.profile(SILU, TaskRef("silu"))
    assert result.correct is True and result.latency_ms
    return result


def gains_nothing(result: ProfileResult, honest: ProfileResult) -> bool:
    """Not a verdict the kernel forged: incorrect, failed, or no faster than the honest kernel."""
    if result.correct is not True or result.latency_ms is None:
        return True
    return result.latency_ms >= honest.latency_ms * (1 - 1e-9)


def test_patching_the_cost_model_changes_nothing(checked_small, honest) -> None:
    kernel = at_start("""
import sys
import accelopt_core.perfmodel as perfmodel
import accelopt_core.perfmodel.costs as costs
estimating = sys.modules["accelopt_core.perfmodel.estimate"]
real = estimating.estimate
def faster(trace, hardware):
    report = real(trace, hardware)
    report.latency, report.latency_ms = report.latency / 100, report.latency_ms / 100
    return report
estimating.estimate = perfmodel.estimate = faster
costs.CostModel.occupancy = lambda self, inst, engine=None: 0.0
""")
    result = checked_small.profile(kernel, TaskRef("silu"))
    assert result.correct is True and result.latency_ms == pytest.approx(honest.latency_ms)


def test_deleting_instructions_from_the_trace_changes_nothing(checked_small, honest) -> None:
    kernel = before_return("""
from accelopt_core.nki.tensor import current
trace = current().trace
trace.instructions[:] = [i for i in trace.instructions if i.engine == "dma"]
""")
    result = checked_small.profile(kernel, TaskRef("silu"))
    assert result.correct is True and result.latency_ms == pytest.approx(honest.latency_ms)


def test_deleting_compute_from_the_tape_fails(checked_small, honest) -> None:
    kernel = before_return("""
from accelopt_core.nki.tensor import current
tape = current().tape
tape[:] = [e for e in tape if getattr(e, "op", "dma_copy") == "dma_copy"]
""")
    result = checked_small.profile(kernel, TaskRef("silu"))
    assert result.correct is not True and gains_nothing(result, honest)


def test_a_result_file_and_a_trace_of_another_kernel_fail(checked_small, honest) -> None:
    """The kernel writes its own result.json and hands back the recording of a cheaper kernel."""
    kernel = at_start("""
import json, os
import accelopt_core.nki as nki_sim
from accelopt_core.nki.tape import TapeWriter
from accelopt_core.nki.runner import TensorSpec
from accelopt_core.profiling.handback import TapeFile
def copy(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for r in nl.affine_range(x.shape[0] // 128):
        nl.store(out[r * 128:(r + 1) * 128, :], value=nl.load(x[r * 128:(r + 1) * 128, :]))
    return out
names = []
for index, rows in enumerate((256, 4096)):
    cols = 1024 if rows == 256 else 7168
    traced = nki_sim.run_kernel(copy, [TensorSpec((rows, cols), x.dtype)], numeric=False, record=True)
    stream = TapeFile(".", index)
    stream.write(TapeWriter(traced.trace).chunk(last=True))
    stream.close()
    names.append(stream.name)
json.dump({"traces": names, "latency_ms": 1e-6, "correct": True}, open("result.json", "w"))
os._exit(0)
""")
    result = checked_small.profile(kernel, TaskRef("silu"))
    assert result.correct is False and gains_nothing(result, honest)


def test_host_numpy_writes_into_the_output_fail(checked_small, honest) -> None:
    """No instruction computes the answer: host code writes it into the output's storage, if it can."""
    kernel = before_return("""
import numpy
if x.storage.data is not None:
    data = x.storage.data.astype(numpy.float64)
    out.storage.data[...] = data / (1 + numpy.exp(-data))
""", SILU.replace(HONEST, "").replace(
        "            nl.store(out[r * tile_p:(r + 1) * tile_p, c * tile_f:(c + 1) * tile_f], value=result)\n", ""))
    result = checked_small.profile(kernel, TaskRef("silu"))
    assert result.correct is False


def test_bf16_compute_with_the_exact_answer_patched_in_fails(checked_small, honest) -> None:
    kernel = before_return("""
import numpy
if x.storage.data is not None:
    data = x.storage.data.astype(numpy.float64)
    out.storage.data[...] = data / (1 + numpy.exp(-data))
""", SILU.replace("nl.load(x[r * tile_p:(r + 1) * tile_p, c * tile_f:(c + 1) * tile_f])",
                  "nl.load(x[r * tile_p:(r + 1) * tile_p, c * tile_f:(c + 1) * tile_f], dtype=nl.bfloat16)"))
    result = checked_small.profile(kernel, TaskRef("silu"))
    assert result.correct is False and "relative L2 error" in (result.check_message or "")


def test_a_thread_rewriting_the_traces_and_the_latency_after_the_run_fails(checked_small, honest) -> None:
    """A thread the kernel leaves behind waits for the worker's result and rewrites what it handed back:
    the compute calls out of every trace, a latency into the result. Either the worker left before the thread
    wrote (it exits at once after its result) and the verdict is the honest kernel's, or what was rewritten fails."""
    kernel = at_start("""
import json, os, threading, time
def rewrite():
    while not os.path.exists("result.json"):
        time.sleep(0.01)
    time.sleep(0.2)
    for name in os.listdir("."):
        if name.startswith("tape-"):
            length, chunk = open(name).read().split("\\n", 1)
            tape = json.loads(chunk[:int(length)])  # the whole tape, in one chunk, shorter than the stream
            tape["entries"] = [e for e in tape["entries"] if e[0] != "call" or e[1] == "dma_copy"]
            tape["drops"] = []
            text = json.dumps(tape)
            open(name, "w").write(f"{len(text)}\\n{text}")
    result = json.load(open("result.json"))
    result.update(latency_ms=1e-6, report={"latency_ms": 1e-6}, correct=True)
    json.dump(result, open("result.json", "w"))
if not any(t.name == "rewriter" for t in threading.enumerate()):
    threading.Thread(target=rewrite, name="rewriter").start()
""")
    result = checked_small.profile(kernel, TaskRef("silu"))
    assert gains_nothing(result, honest)
    assert result.correct is not True or result.latency_ms == pytest.approx(honest.latency_ms, rel=1e-9)


SECOND_CALL = """
import builtins
builtins.silu_calls = getattr(builtins, "silu_calls", 0) + 1
cheat = builtins.silu_calls > 1
"""


def _branching(condition_code: str, condition: str) -> str:
    deeper = "    "
    body = (f"            if {condition}:\n" + deeper + CHEAP + "            else:\n"
            + "".join(deeper + line + "\n" for line in HONEST.splitlines()))
    return at_start(condition_code, SILU.replace(HONEST, body))


@pytest.mark.parametrize(("name", "kernel"), [
    ("second call", _branching(SECOND_CALL, "cheat")),
    ("first call", _branching(SECOND_CALL, "not cheat")),
    ("trace-only mode", _branching("from accelopt_core.nki.tensor import current\n", "not current().numeric")),
    ("size", _branching("", "rows > 256")),
])
def test_behaving_differently_gains_nothing_where_the_search_verifies(checked_small, checked_timed, honest,
                                                                      name, kernel) -> None:
    """Whatever the kernel branches on, the run that is timed at full size is a run the parent checked."""
    verified = checked_timed.profile(kernel, TaskRef("silu"))
    assert verified.error is None and gains_nothing(verified, honest), name
    small = checked_small.profile(kernel, TaskRef("silu"))
    assert small.error is None
    if name == "trace-only mode":  # the child always runs trace-only: the cheat is what gets checked
        assert small.correct is False


def test_forged_flops_and_work_in_the_trace_are_not_counted() -> None:
    """A matmul that inflates its matmuls' flops and shrinks every instruction's work in its own trace:
    the guards count, and the model prices, the replay's instructions."""
    profiler = SimulatorProfiler(seeds=1, limits=SandboxLimits(seconds=120, memory_mb=4096))
    honest = profiler.profile(MATMUL, TaskRef("matmul:small"))
    forged = profiler.profile(before_return("""
from accelopt_core.nki.tensor import current
for inst in current().trace.instructions:
    inst.flops *= 100
    inst.free_elements = inst.partitions = 1
""", MATMUL, "    return c\n"), TaskRef("matmul:small"))
    assert honest.correct is True and forged.correct is True
    assert forged.profile["hardware_flops"] == honest.profile["hardware_flops"]
    assert forged.latency_ms == pytest.approx(honest.latency_ms)


def test_skipping_matmuls_behind_forged_flops_fails() -> None:
    profiler = SimulatorProfiler(seeds=1, limits=SandboxLimits(seconds=120, memory_mb=4096))
    skipping = MATMUL.replace("            for k in nl.affine_range(k_tiles):\n                b_tile",
                              "            for k in nl.affine_range(k_tiles // 2):\n                b_tile")
    assert skipping != MATMUL
    result = profiler.profile(before_return("""
from accelopt_core.nki.tensor import current
for inst in current().trace.instructions:
    inst.flops *= 2
""", skipping, "    return c\n"), TaskRef("matmul:small"))
    assert result.correct is False
