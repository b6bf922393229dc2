"""A kernel written against NKI 0.8's documentation (a fori_loop, NkiTensor views, an NkiScalar select), profiled
as a user profiles one: `accelopt profile --hardware trn3 --json` in a subprocess, checked on 5 seeds."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

KERNEL = '''import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def kernel(x, which):
    out = nl.ndarray((5, 128, 64), dtype=x.dtype, buffer=nl.shared_hbm)

    def body(i):
        t = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[i])
        s = nl.ndarray((128, 8, 8), dtype=x.dtype, buffer=nl.sbuf)
        nisa.activation(dst=s, op=nl.exp, data=t.reshape_dim(1, (8, 8)).permute((0, 2, 1)))
        nisa.dma_copy(dst=out[i].reshape_dim(1, (8, 8)).permute((0, 2, 1)), src=s)

    nl.fori_loop(0, 4, body)
    index = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=index, src=which)
    row = nisa.scalar_load(index)
    picked = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=picked, src=x.select(0, row))
    nisa.dma_copy(dst=out[4], src=picked)
    return out
'''

REFERENCE = '''import numpy as np


def make_inputs(rng):
    return [rng.standard_normal((4, 128, 64), dtype=np.float32), rng.integers(0, 4, size=(1, 1), dtype=np.int32)]


def reference(x, which):
    return np.concatenate([np.exp(x), x[which[0, 0]][None]])
'''


def test_an_nki_08_kernel_is_correct_on_trainium3_and_says_uncalibrated(tmp_path: Path) -> None:
    (tmp_path / "nki08.py").write_text(KERNEL)
    (tmp_path / "nki08_ref.py").write_text(REFERENCE)
    run = subprocess.run([sys.executable, "-m", "accelopt_core", "profile", str(tmp_path / "nki08.py"), "--reference",
                          str(tmp_path / "nki08_ref.py"), "--hardware", "trn3", "--json"],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    data = json.loads(run.stdout)
    assert data["correct"] is True and len(data["seeds"]) == 5 and data["latency_ms"] > 0
    assert data["hardware"] == "trn3" and data["calibrated"] is False
    assert data["nki_api"] == "NKI 0.7+ (nisa.scalar_load, line 20)"
