"""Kernels of our own that attack the sandbox: a correct doubling kernel that first runs an attack, and
the profiler that runs it. An attack reports what it got by raising `RuntimeError("GOT ...")`, so the
test reads the outcome from the profile's error."""

from __future__ import annotations

import textwrap
from pathlib import Path

from accelopt_core.profiling import SandboxLimits, SimulatorProfiler, TaskRef
from accelopt_core.profiling.result import ProfileResult

REFERENCE = textwrap.dedent('''
    """Doubling a 128 x 64 matrix (the attacks' task)."""
    import numpy as np

    SECRET_IN_REFERENCE = "reference-secret-7f3a"


    def make_inputs(rng):
        return [rng.standard_normal((128, 64), dtype=np.float32)]


    def reference(x):
        return x * 2.0
''')

KERNEL = '''import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def kernel(x):
{attack}    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.multiply(nl.load(x), 2.0))
    return out
'''

# The audit hook is only a second layer: a kernel owns its process and can switch the hook off (replace
# the code of the hook function, found among the garbage collector's objects). Attacks that must be
# stopped by the operating system start with this.
DISABLE_AUDIT_HOOK = '''
import gc
def _harmless(check_open):
    def hook(event, args):
        return check_open and None
    return hook
for _f in gc.get_objects():
    if type(_f).__name__ == "function" and _f.__qualname__.endswith("_install_guard.<locals>.hook"):
        _f.__code__ = _harmless(None).__code__
'''


def attack_kernel(attack: str) -> str:
    """The doubling kernel with `attack` (Python statements) run first, inside the kernel function."""
    return KERNEL.format(attack=textwrap.indent(textwrap.dedent(attack).strip("\n") + "\n", "    "))


def write_reference(folder: Path) -> TaskRef:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "double_ref.py"
    path.write_text(REFERENCE)
    return TaskRef(reference=str(path))


def run_attack(attack: str, task: TaskRef, *, seconds: float = 30.0, memory_mb: int = 2048, disk_mb: int = 16384,
               forbidden: tuple[str, ...] = (), kernel_file: Path | None = None) -> ProfileResult:
    """Profile the attacking kernel once (one seed), as the search would: no cache, confinement required."""
    profiler = SimulatorProfiler(seeds=1, limits=SandboxLimits(seconds=seconds, memory_mb=memory_mb, disk_mb=disk_mb),
                                 forbidden_paths=forbidden, cache={})
    source = attack_kernel(attack)
    label = "candidate.py"
    if kernel_file is not None:
        kernel_file.write_text(source)
        label = str(kernel_file)
    return profiler.profile(source, task, kernel_label=label)
