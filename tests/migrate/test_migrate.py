"""The first slice of `accelopt migrate`: mechanical rewrites of a legacy kernel into the nki package, the
lines left for a person, and the verification that runs both versions on the same fresh seeds."""

from __future__ import annotations

import textwrap
from pathlib import Path

from accelopt_core.migrate import migrate_source, verify
from accelopt_core.nki.api_versions import detect_version
from accelopt_core.profiling import TaskRef

LEGACY = textwrap.dedent('''
    import neuronxcc.nki as nki
    import neuronxcc.nki.language as nl


    @nki.jit
    def kernel(x, y):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        for i in nl.affine_range(x.shape[0] // 128):
            a = nl.load(x[i * 128:(i + 1) * 128, :])
            b = nl.load(y[i * 128:(i + 1) * 128, :])
            e = nl.exp(a)
            s = nl.add(e, b)
            t = nl.multiply(s, 2.0)
            u = nl.copy(t, dtype=x.dtype)
            nl.store(out[i * 128:(i + 1) * 128, :], value=u)
        return out
''')

REFERENCE = textwrap.dedent('''
    import numpy as np


    def make_inputs(rng):
        return [rng.standard_normal((256, 512), dtype=np.float32), rng.standard_normal((256, 512), dtype=np.float32)]


    def reference(x, y):
        return (np.exp(x) + y) * 2.0
''')


def test_a_tutorial_style_kernel_migrates_completely():
    migration = migrate_source(LEGACY)
    assert migration.complete, migration.needs_person
    code = migration.source
    assert "neuronxcc" not in code and "import nki\n" in code and "import nki.isa as nisa\n" in code
    assert "for i in range(x.shape[0] // 128):" in code
    assert "nisa.dma_copy(dst=a, src=x[i * 128:(i + 1) * 128, :])" in code
    assert "nisa.activation(dst=e, op=nl.exp, data=a)" in code
    assert "nisa.tensor_tensor(dst=s, data1=e, data2=b, op=nl.add)" in code
    assert "nisa.tensor_scalar(dst=t, data=s, op0=nl.multiply, operand0=2.0)" in code
    assert "u = nl.ndarray(t.shape, dtype=x.dtype, buffer=nl.sbuf)\n        nisa.tensor_copy(dst=u, src=t)" in code
    assert "nisa.dma_copy(dst=out[i * 128:(i + 1) * 128, :], src=u)" in code
    assert not detect_version(code).legacy


def test_a_tile_the_kernel_allocated_is_read_as_one():
    allocated = "z = nl.zeros(a.shape, dtype=a.dtype, buffer=nl.sbuf)\n        e = nl.exp(z)"
    source = LEGACY.replace("e = nl.exp(a)", allocated)
    migration = migrate_source(source)
    assert migration.complete and "nisa.activation(dst=e, op=nl.exp, data=z)" in migration.source


def test_what_is_not_mechanical_stays_with_a_reason_per_line():
    source = LEGACY.replace("t = nl.multiply(s, 2.0)", "t = nl.softmax(s, axis=1)")
    migration = migrate_source(source)
    line = next(n for n, text in enumerate(migration.source.splitlines(), 1) if "nl.softmax" in text)
    assert (line, "nl.softmax has no mechanical nki-package form here") in migration.needs_person
    assert not migration.complete


def test_both_versions_agree_on_the_same_fresh_seeds(tmp_path: Path):
    (tmp_path / "ref.py").write_text(REFERENCE)
    migrated = migrate_source(LEGACY).source
    verified = verify(LEGACY, migrated, TaskRef(reference=str(tmp_path / "ref.py")), seeds=[1, 2])
    assert verified.agree and verified.original.seeds == verified.migrated.seeds == [1, 2]
    assert verified.original.latency_ms > 0 and verified.migrated.latency_ms > 0
    assert verified.migrated.nki_api == "NKI 0.2+"


def test_the_silu_baseline_migrates_completely_and_agrees():
    """Nested nl calls (`nl.add(nl.exp(nl.negative(tile)), 1.0)`) become one tile each, innermost first."""
    source = (Path(__file__).resolve().parents[2] / "nkibench" / "kernels" / "silu.py").read_text()
    migration = migrate_source(source)
    assert migration.complete, migration.needs_person
    assert "nisa.tensor_scalar(dst=denominator_1_1, data=tile, op0=nl.multiply, operand0=-1.0)" in migration.source
    verified = verify(source, migration.source, TaskRef(name="silu:small"), seeds=[3, 4])
    assert verified.agree, (verified.original.check_message, verified.migrated.check_message)
