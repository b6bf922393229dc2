"""`accelopt optimize` as a user runs it on their own kernel and reference file: progress, the best
kernel and its diff, and a second run that starts from what the first one learned."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

KERNEL = textwrap.dedent('''
    import neuronxcc.nki as nki
    import neuronxcc.nki.language as nl


    @nki.jit
    def kernel(a, b):
        rows, cols = a.shape
        out = nl.ndarray((rows, cols), dtype=a.dtype, buffer=nl.shared_hbm)
        for r in nl.affine_range(rows // 128):
            for c in nl.affine_range(cols // 256):
                x = nl.load(a[r * 128:(r + 1) * 128, c * 256:(c + 1) * 256])
                y = nl.load(b[r * 128:(r + 1) * 128, c * 256:(c + 1) * 256])
                nl.store(out[r * 128:(r + 1) * 128, c * 256:(c + 1) * 256], value=nl.exp(nl.add(x, y)))
        return out
''')

REFERENCE = textwrap.dedent('''
    import numpy as np

    FAMILY = "elementwise"


    def make_inputs(rng, rows=512, cols=2048):
        return [rng.standard_normal((rows, cols)).astype(np.float32) * 0.5 for _ in range(2)]


    def reference(a, b):
        return np.exp(a.astype(np.float64) + b)
''')


def optimize(tmp_path: Path, name: str, *extra: str) -> subprocess.CompletedProcess[str]:
    kernel = tmp_path / f"{name}.py"
    kernel.write_text(KERNEL)
    return subprocess.run([sys.executable, "-m", "accelopt_core", "optimize", str(kernel), "--reference",
                           str(tmp_path / "ref.py"), "--preset", "quick", "--workers", "1", "--db",
                           str(tmp_path / "m.db"), *extra], capture_output=True, text=True, timeout=600)


def test_optimize_a_reference_file_task_then_replay_what_it_learned(tmp_path: Path) -> None:
    (tmp_path / "ref.py").write_text(REFERENCE)
    first = optimize(tmp_path, "first")
    assert first.returncode == 0, first.stderr
    assert "simulated trn1" in first.stdout and "speedup" in first.stdout
    assert "the free-axis tile size 256 (a literal)" in first.stdout  # a literal tile size, retuned
    assert "[replayed]" not in first.stderr  # nothing remembered yet
    assert (tmp_path / "first.optimized.py").exists() and (tmp_path / "first.optimized.diff").read_text()
    second = optimize(tmp_path, "second")
    assert second.returncode == 0, second.stderr
    assert "[replayed] memory replay kept" in second.stderr
    off = optimize(tmp_path, "third", "--replay-steps", "0")
    assert off.returncode == 0 and "[replayed]" not in off.stderr
