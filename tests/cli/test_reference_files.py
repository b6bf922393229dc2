"""A reference file named `ref.py` beside each kernel (as the README shows) gives its task a family
that says what the task is, and a size variant is picked as a named task's is (`ref.py:small`)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from test_profile_cli import ADD_KERNEL, accelopt

from accelopt_core.engine import check_variant, kernel_family_name, task_family
from accelopt_core.profiling import TaskRef
from accelopt_core.tasks.declared import split_reference

SIZED_REFERENCE = textwrap.dedent('''
    import numpy as np

    VARIANTS = {"full": {"rows": 512}, "small": {"rows": 128}}


    def make_inputs(rng, rows):
        return [rng.standard_normal((rows, 512), dtype=np.float32) for _ in range(2)]


    def reference(x, y):
        return x + y
''')


def test_a_generic_reference_name_gives_the_kernel_s_family(tmp_path: Path) -> None:
    (tmp_path / "ref.py").write_text(SIZED_REFERENCE)
    ref = TaskRef(reference=str(tmp_path / "ref.py"))
    assert task_family(ref, kernel_family_name("mamba_scan", "kernels/k.py")) == "mamba_scan"
    assert task_family(ref, kernel_family_name("kernel", "work/matmul.optimized.py")) == "matmul"
    assert kernel_family_name("kernel", "kernel.py") is None
    assert task_family(ref) == "ref"  # nothing better known: the file's name, as before
    (tmp_path / "matmul_ref.py").write_text(SIZED_REFERENCE)
    assert task_family(TaskRef(reference=str(tmp_path / "matmul_ref.py")), "other") == "matmul"
    (tmp_path / "ref.py").write_text('FAMILY = "elementwise"\n' + SIZED_REFERENCE)
    assert task_family(ref, "mamba_scan") == "elementwise"  # declared wins
    assert task_family(TaskRef(name="silu:small"), "mine") == "elementwise"  # NKIBench silu declares its family


def test_a_reference_names_its_size_variant_after_a_colon(tmp_path: Path) -> None:
    (tmp_path / "ref.py").write_text(SIZED_REFERENCE)
    path = str(tmp_path / "ref.py")
    assert split_reference(path + ":small") == (path, "small") and split_reference(path) == (path, None)
    (tmp_path / "odd:name.py").write_text(SIZED_REFERENCE)
    assert split_reference(str(tmp_path / "odd:name.py")) == (str(tmp_path / "odd:name.py"), None)
    small = TaskRef(reference=path, variant="small")
    assert small.load().make_case(0).inputs[0].shape == (128, 512) and small.key != TaskRef(reference=path).key
    assert check_variant(small) is None and check_variant(TaskRef(reference=path)) == "small"


def test_profile_takes_a_size_variant_with_the_reference(tmp_path: Path) -> None:
    (tmp_path / "add.py").write_text(ADD_KERNEL)
    (tmp_path / "ref.py").write_text(SIZED_REFERENCE)
    run = accelopt("profile", str(tmp_path / "add.py"), "--reference", f"{tmp_path / 'ref.py'}:small", "--json")
    assert run.returncode == 0, run.stderr
    data = json.loads(run.stdout)
    assert data["task"] == "ref:small" and data["correct"] is True
    assert data["hbm_read_bytes"] == 2 * 128 * 512 * 4  # the small size: two 128 x 512 float32 inputs
    unknown = accelopt("profile", str(tmp_path / "add.py"), "--reference", f"{tmp_path / 'ref.py'}:huge")
    assert unknown.returncode == 2 and "unknown variant 'huge'; variants: full, small" in unknown.stderr
