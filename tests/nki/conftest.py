"""Shared helpers for the NKI simulator tests.

Every kernel in these tests is given as source text, written to a temporary file and loaded with
`load_module`, so its `import neuronxcc.nki...` / `import nki...` lines go through the real import
hook. `run` executes it twice, numerically and in trace-only mode, and checks that both modes record
the same instruction list: the performance model only ever sees trace-only runs, so they must agree.
The trace-only run is recorded, and its tape, through its JSON wire form, is replayed numerically on
the same inputs: the replay must give the numeric run's outputs bit for bit and its instruction list,
since the trusted side judges and times a sandboxed kernel by that replay.
"""

from __future__ import annotations

import itertools
import json
import re
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from accelopt_core.nki import (
    Instruction,
    NkiError,
    RunResult,
    TensorSpec,
    find_kernel,
    load_kernel,
    load_module,
    run_kernel,
)
from accelopt_core.nki.blocks import BlockLiveness
from accelopt_core.nki.replay import replay
from accelopt_core.nki.runner import Kernel
from accelopt_core.nki.tape import tape_to_plain

_counter = itertools.count()


@dataclass
class Both:
    """The numeric run and the trace-only run of one kernel."""

    numeric: RunResult
    traced: RunResult
    kernel: Kernel
    module: Any
    source: str

    @property
    def outputs(self) -> list[np.ndarray | None]:
        return self.numeric.outputs

    @property
    def out(self) -> np.ndarray:
        assert self.numeric.outputs[0] is not None
        return self.numeric.outputs[0]

    @property
    def instructions(self) -> list[Instruction]:
        return self.numeric.trace.instructions

    def ops(self) -> list[tuple[str, str]]:
        """(engine, op) of every instruction, in order."""
        return [(i.engine, i.op) for i in self.instructions]

    def line_of(self, marker: str) -> int:
        """1-based line number of the source line carrying `# <marker>`."""
        return line_of(self.source, marker)


def line_of(source: str, marker: str) -> int:
    for number, text in enumerate(source.splitlines(), start=1):
        if re.search(rf"#\s*{re.escape(marker)}\b", text):
            return number
    raise AssertionError(f"marker {marker!r} not in kernel source")


def signature(inst: Instruction) -> tuple[Any, ...]:
    """Everything about an instruction except computed values: mode comparison key."""
    loops = tuple((loop.id, loop.kind, loop.trip_count, index) for loop, index in inst.loops)
    return (inst.engine, inst.op, inst.reads, inst.writes, inst.partitions, inst.free_elements, inst.flops,
            inst.line, loops, inst.attrs, inst.dtype)


def assert_same_trace(a: RunResult, b: RunResult) -> None:
    assert len(a.trace.instructions) == len(b.trace.instructions), "instruction counts differ between modes"
    for x, y in zip(a.trace.instructions, b.trace.instructions, strict=True):
        assert signature(x) == signature(y), f"instruction {x.index} differs between modes"
    assert a.output_shapes == b.output_shapes
    assert [(t.name, t.buffer, t.shape, t.dtype) for t in a.trace.tensors.values()] == [
        (t.name, t.buffer, t.shape, t.dtype) for t in b.trace.tensors.values()]


def _spec(value: Any) -> Any:
    return TensorSpec.of(value) if isinstance(value, np.ndarray) else value


def _write(tmp_path: Path, source: str) -> str:
    path = tmp_path / f"kernel_{next(_counter)}.py"
    path.write_text(source, encoding="utf-8")
    return str(path)


@pytest.fixture
def load(tmp_path: Path) -> Callable[..., tuple[Any, Kernel, str]]:
    """load(source, name=None) -> (module, kernel, dedented source), through the import hook."""

    def _load(source: str, name: str | None = None) -> tuple[Any, Kernel, str]:
        source = textwrap.dedent(source).lstrip("\n")
        module = load_module(source, _write(tmp_path, source))
        return module, find_kernel(module, name), source

    return _load


def run_both(kernel: Kernel, args: tuple[Any, ...], kwargs: dict[str, Any],
             hardware: str | None = None) -> tuple[RunResult, RunResult]:
    """Run numerically and trace-only (inputs as TensorSpec) and check the traces agree."""
    numeric = run_kernel(kernel, list(args), kwargs, numeric=True, hardware=hardware)
    traced = run_kernel(kernel, [_spec(a) for a in args], {k: _spec(v) for k, v in kwargs.items()},
                        numeric=False, hardware=hardware, record=True)
    assert all(o is None for o in traced.outputs)
    assert_same_trace(numeric, traced)
    assert_replays(numeric, traced, [a for a in (*args, *kwargs.values()) if isinstance(a, np.ndarray)],
                   hardware or numeric_hardware(kernel))
    return numeric, traced


def numeric_hardware(kernel: Kernel) -> str:
    target = kernel.options.get("platform_target")
    return target if target in ("trn1", "trn2") else "trn1"


def assert_replays(numeric: RunResult, traced: RunResult, arrays: list[np.ndarray], hardware: str) -> None:
    """The recorded tape, as JSON, replays to the numeric run's outputs (bit for bit) and trace, also when
    the replay holds every block tensor block by block (nki/blocks.py; in production only large ones), and
    when it borrows its inputs (reads them and the tiles loaded from them where they are), leaving the
    caller's arrays as they were."""
    plain = json.loads(json.dumps(tape_to_plain(traced.trace)))
    given = [a.copy() for a in arrays]
    for liveness, borrow in ((None, False), (BlockLiveness.of(traced.trace, smallest=1), False), (None, True)):
        replayed = replay(plain, arrays, hardware, numeric=True, liveness=liveness, borrow_inputs=borrow)
        assert all(a.tobytes() == b.tobytes() for a, b in zip(arrays, given, strict=True))
        assert len(replayed.outputs) == len(numeric.outputs)
        for ours, theirs in zip(replayed.outputs, numeric.outputs, strict=True):
            assert ours is not None and theirs is not None and ours.dtype == theirs.dtype
            assert np.array_equal(ours.view(np.uint8), theirs.view(np.uint8)), "the replay computes other outputs"
        assert_same_trace(numeric, replayed)
        assert replayed.returned_input == numeric.returned_input


@pytest.fixture
def run(load: Callable[..., tuple[Any, Kernel, str]]) -> Callable[..., Both]:
    """run(source, *args, name=None, hardware=None, **kwargs) -> Both (both modes, traces compared)."""

    def _run(source: str, *args: Any, name: str | None = None, hardware: str | None = None,
             **kwargs: Any) -> Both:
        module, kernel, text = load(source, name)
        numeric, traced = run_both(kernel, args, kwargs, hardware)
        return Both(numeric, traced, kernel, module, text)

    return _run


@pytest.fixture
def run_file() -> Callable[..., Both]:
    """run_file(path, *args) -> Both, for kernels that live in files (the shipped examples)."""

    def _run_file(path: str, *args: Any) -> Both:
        kernel = load_kernel(path)
        numeric, traced = run_both(kernel, args, {})
        return Both(numeric, traced, kernel, None, Path(path).read_text(encoding="utf-8"))

    return _run_file


@pytest.fixture
def fails(load: Callable[..., tuple[Any, Kernel, str]]) -> Callable[..., NkiError]:
    """fails(source, *args, error=NkiError, marker="ERR") -> the error, raised identically in both modes
    and pointing at the kernel line marked `# ERR`."""

    def _fails(source: str, *args: Any, error: type[NkiError] = NkiError, marker: str = "ERR",
               hardware: str | None = None, **kwargs: Any) -> NkiError:
        _, kernel, text = load(source)
        caught: list[NkiError] = []
        for numeric in (True, False):
            inputs = list(args) if numeric else [_spec(a) for a in args]
            with pytest.raises(error) as info:
                run_kernel(kernel, inputs, kwargs, numeric=numeric, hardware=hardware)
            caught.append(info.value)
        assert str(caught[0]) == str(caught[1])
        err = caught[0]
        assert err.line == line_of(text, marker), f"error points at line {err.line}: {err}"
        assert f":{err.line}:" in str(err)
        return err

    return _fails


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)
