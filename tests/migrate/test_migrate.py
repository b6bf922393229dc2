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


def _migrated_body(body: str) -> tuple[str, list[tuple[int, str]]]:
    """`body` (kernel lines, 4-space indented) inside a legacy kernel with tiles `a` and `b` loaded."""
    source = textwrap.dedent('''
        import neuronxcc.nki as nki
        import neuronxcc.nki.isa as nisa
        import neuronxcc.nki.language as nl


        @nki.jit
        def kernel(x, y):
            out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            a = nl.load(x)
            b = nl.load(y)
    ''') + textwrap.indent(textwrap.dedent(body), "    ") + "    return out\n"
    migration = migrate_source(source)
    return migration.source, migration.needs_person


def test_a_transpose_copied_out_goes_through_psum_into_the_named_tile():
    code, left = _migrated_body("t = nl.copy(nisa.nc_transpose(a))\nnl.store(out, value=t)\n")
    assert not left, left
    assert "t_1 = nl.ndarray((a.shape[1], a.shape[0]), dtype=a.dtype, buffer=nl.psum)" in code
    assert "nisa.nc_transpose(dst=t_1, data=a)" in code and "nisa.tensor_copy(dst=t, src=t_1)" in code


def test_a_transpose_copied_into_part_of_a_tile_writes_that_part():
    code, left = _migrated_body("t = nl.ndarray((128, 256), dtype=a.dtype, buffer=nl.sbuf)\n"
                                "t[:, 0:128] = nl.copy(nisa.nc_transpose(a[:, 0:128]))\nnl.store(out, value=t)\n")
    assert not left, left
    assert "nisa.nc_transpose(dst=t_1, data=a[:, 0:128])" in code
    assert "nisa.tensor_copy(dst=t[:, 0:128], src=t_1)" in code


def test_a_matmul_in_return_form_gets_a_float32_psum_dst_and_plus_equals_accumulates():
    code, left = _migrated_body("p = nisa.nc_matmul(a, b)\n"
                                "acc = nl.zeros((128, 512), dtype=nl.float32, buffer=nl.psum)\n"
                                "acc += nisa.nc_matmul(a, b[:, 0:512])\nnl.store(out, value=nl.copy(acc))\n")
    assert not left, left
    assert "p = nl.ndarray((a.shape[1], b.shape[1]), dtype=nl.float32, buffer=nl.psum)" in code
    assert "nisa.nc_matmul(dst=p, stationary=a, moving=b)" in code
    assert "nisa.nc_matmul(dst=acc, stationary=a, moving=b[:, 0:512], accumulate=True)" in code
    assert "nisa.tensor_copy(dst=out_stored, src=acc)" in code and "nisa.dma_copy(dst=out, src=out_stored)" in code


def test_an_instruction_keeps_its_keywords_and_names_its_positionals():
    code, left = _migrated_body("s = nisa.tensor_tensor_scan(a, b, initial=0.0, op0=nl.multiply, op1=nl.add)\n"
                                "e = nisa.activation(op=nl.exp, data=a, scale=2.0)\n")
    assert not left, left
    assert "nisa.tensor_tensor_scan(dst=s, data0=a, data1=b, initial=0.0, op0=nl.multiply, op1=nl.add)" in code
    assert "e = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)" in code
    assert "nisa.activation(dst=e, op=nl.exp, data=a, scale=2.0)" in code


def test_a_mask_of_none_is_no_mask():
    code, left = _migrated_body("p = nisa.nc_matmul(a, b, mask=None)\n")
    assert not left and "nisa.nc_matmul(dst=p, stationary=a, moving=b)" in code


def test_row_reductions_become_tensor_reduce_and_a_column_operand_a_scalar_one():
    code, left = _migrated_body("m = nl.max(a, axis=1, keepdims=True)\nmu = nl.mean(a, axis=1, keepdims=True)\n"
                                "d = nl.subtract(a, m)\n")
    assert not left, left
    assert "m = nl.ndarray((a.shape[0], 1), dtype=a.dtype, buffer=nl.sbuf)" in code
    assert "nisa.tensor_reduce(dst=m, op=nl.maximum, data=a, axis=1, keepdims=True)" in code
    assert ("nisa.tensor_reduce(dst=mu, op=nl.add, data=a, axis=1, keepdims=True)\n"
            "    nisa.tensor_scalar(dst=mu, data=mu, op0=nl.multiply, operand0=1.0 / a.shape[1])") in code
    assert "nisa.tensor_scalar(dst=d, data=a, op0=nl.subtract, operand0=m)" in code


def test_a_reduction_along_another_axis_is_left_for_a_person():
    _, left = _migrated_body("m = nl.max(a, axis=0, keepdims=True)\n")
    assert [reason for _, reason in left] == ["nl.max has no mechanical nki-package form here"]


def test_the_bmm_softmax_baseline_migrates_completely_and_agrees():
    """Transposes through PSUM, matmuls in dst form, softmax's row max and sum as tensor_reduce."""
    source = (Path(__file__).resolve().parents[2] / "nkibench" / "kernels" / "bmm_softmax.py").read_text()
    migration = migrate_source(source)
    assert migration.complete, migration.needs_person
    verified = verify(source, migration.source, TaskRef(name="bmm_softmax:small"), seeds=[5, 6])
    assert verified.agree, (verified.original.check_message, verified.migrated.check_message)


def test_a_block_dimension_becomes_a_python_list_of_tiles():
    """As the block-dimension migration guide does: `t[k]` reads the same, `t[k, i]` becomes `t[k][i]`."""
    code, left = _migrated_body("t = nl.ndarray((4, nl.par_dim(128), 64), dtype=a.dtype, buffer=nl.sbuf)\n"
                                "for k in nl.affine_range(4):\n"
                                "    t[k] = nl.load(x[k * 128:(k + 1) * 128, 0:64])\n"
                                "    t[k, :, 0:32] = nl.exp(t[k, :, 32:64])\n")
    assert not left, left
    assert "t = [nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.sbuf) for _ in range(4)]" in code
    assert "nisa.dma_copy(dst=t[k], src=x[k * 128:(k + 1) * 128, 0:64])" in code
    assert "nisa.activation(dst=t[k][:, 0:32], op=nl.exp, data=t[k][:, 32:64])" in code


def test_a_tile_without_block_dimension_stays_one_tile():
    code, _ = _migrated_body("t = nl.ndarray((nl.par_dim(128), 4, 64), dtype=a.dtype, buffer=nl.sbuf)\n")
    assert "t = nl.ndarray((nl.par_dim(128), 4, 64), dtype=a.dtype, buffer=nl.sbuf)" in code


def test_the_matmul_baseline_loses_its_block_dimension_and_agrees():
    source = (Path(__file__).resolve().parents[2] / "nkibench" / "kernels" / "matmul.py").read_text()
    migration = migrate_source(source)
    assert migration.complete, migration.needs_person
    assert "nl.par_dim" not in migration.source
    verified = verify(source, migration.source, TaskRef(name="matmul:small"), seeds=[7, 8])
    assert verified.agree, (verified.original.error, verified.migrated.error, verified.migrated.check_message)


def test_an_element_wise_dtype_is_the_allocations_dtype():
    code, left = _migrated_body("s = nl.add(a, b, dtype=nl.bfloat16)\n")
    assert not left, left
    assert "s = nl.ndarray(a.shape, dtype=nl.bfloat16, buffer=nl.sbuf)" in code


def test_a_module_constant_and_a_negative_number_are_scalar_operands():
    _, left = _migrated_body("s = nl.add(a, EPS)\nt = nl.multiply(a, -2)\n")
    assert [reason for _, reason in left] == ["nl.add has no mechanical nki-package form here"]  # EPS: unknown
    source = "EPS = 1e-6\n" + textwrap.dedent('''
        import neuronxcc.nki as nki
        import neuronxcc.nki.language as nl


        @nki.jit
        def kernel(x):
            a = nl.load(x)
            s = nl.add(a, EPS)
            t = nl.multiply(a, -2)
    ''')
    migration = migrate_source(source)
    assert migration.complete, migration.needs_person
    assert "nisa.tensor_scalar(dst=s, data=a, op0=nl.add, operand0=EPS)" in migration.source
    assert "nisa.tensor_scalar(dst=t, data=a, op0=nl.multiply, operand0=-2)" in migration.source


def test_element_wise_on_a_column_stays_a_column_operand():
    code, left = _migrated_body("m = nl.sum(a, axis=1, keepdims=True)\nr = nl.sqrt(nl.add(m, 1.0))\n"
                                "d = nl.divide(a, r)\n")
    assert not left, left
    assert "nisa.tensor_scalar(dst=d, data=a, op0=nl.divide, operand0=r)" in code


def test_a_partition_broadcast_is_the_ones_matmul_the_legacy_api_lowers_it_to():
    code, left = _migrated_body("row = nl.load(x[0:1, 0:512])\n"
                                "wide = nl.broadcast_to(row, shape=(128, 512))\n")
    assert not left, left
    assert ("wide = nl.ndarray((128, 512), dtype=row.dtype, buffer=nl.sbuf)\n"
            "    wide_ones = nl.ndarray((1, 128), dtype=row.dtype, buffer=nl.sbuf)\n"
            "    nisa.memset(dst=wide_ones, value=1.0)\n"
            "    for wide_start in range(0, 512, nl.tile_size.gemm_moving_fmax):\n"
            "        wide_end = min(wide_start + nl.tile_size.gemm_moving_fmax, 512)\n"
            "        wide_broadcast = nl.ndarray((128, wide_end - wide_start), dtype=nl.float32, buffer=nl.psum)\n"
            "        nisa.nc_matmul(dst=wide_broadcast, stationary=wide_ones, moving=row[:, wide_start:wide_end])\n"
            "        nisa.tensor_copy(dst=wide[:, wide_start:wide_end], src=wide_broadcast)") in code


def test_the_mamba_baseline_migrates_completely_and_agrees():
    """Return-form activation and tensor_tensor_scan, and two partition broadcasts."""
    source = (Path(__file__).resolve().parents[2] / "nkibench" / "kernels" / "mamba.py").read_text()
    migration = migrate_source(source)
    assert migration.complete, migration.needs_person
    verified = verify(source, migration.source, TaskRef(name="mamba:small"), seeds=[9, 10])
    assert verified.agree, (verified.original.error, verified.migrated.error, verified.migrated.check_message)


def test_a_scale_computed_from_sizes_is_a_scalar_operand():
    """gqa_full's `scale = 1.0 / math.sqrt(d_head)` with `d_head` from `q.shape`."""
    code, left = _migrated_body("rows, cols = x.shape\nscale = 1.0 / math.sqrt(cols)\nwidth = x.shape[1] * 2\n"
                                "s = nl.multiply(a, scale)\nt = nl.add(a, width)\n")
    assert not left, left
    assert "nisa.tensor_scalar(dst=s, data=a, op0=nl.multiply, operand0=scale)" in code
    assert "nisa.tensor_scalar(dst=t, data=a, op0=nl.add, operand0=width)" in code


def test_a_name_computed_by_the_kernel_modules_is_not_taken_for_a_number():
    _, left = _migrated_body("c = nl.sum(a, axis=0)\ns = nl.multiply(a, c)\n")
    assert [reason for _, reason in left] == ["nl.sum has no mechanical nki-package form here",
                                              "nl.multiply has no mechanical nki-package form here"]


def test_the_editors_offer_says_what_the_run_of_both_showed(tmp_path: Path):
    from accelopt_core.migrate import MigrationOffer, offer_migration
    from accelopt_core.profiling import SimulatorProfiler

    (tmp_path / "ref.py").write_text(REFERENCE)
    offer = offer_migration(LEGACY, TaskRef(reference=str(tmp_path / "ref.py")), SimulatorProfiler(seeds=2))
    assert offer.base_source == LEGACY and offer.complete and offer.agree
    assert offer.title.startswith("Migrate to NKI 0.8 — both correct on the same seeds, ")
    assert offer.title.endswith(" ms (simulated trn2)")
    left = MigrationOffer("a", "b", False, True, ((3, "why"), (4, "why")), 1.0, 2.0, "simulated trn2")
    assert left.title == "Migrate to NKI 0.8 — both correct, 2 lines left for a person, 1 -> 2 ms (simulated trn2)"
    wrong = MigrationOffer("a", "b", True, False, (), None, None, "simulated trn2")
    assert wrong.title == "Migrate to NKI 0.8 — the migrated kernel does not pass its check"


def test_masks_over_index_grids_become_slice_bounds_as_beta_2_moved_them():
    code, left = _migrated_body("i_p = nl.arange(128)[:, None]\ni_f = nl.arange(512)[None, :]\n"
                                "row = 128 * 2 + i_p\nvalid = row < x.shape[0]\n"
                                "t = nl.load(x[row, i_f], mask=valid)\n"
                                "u = nl.multiply(t, 2.0, mask=valid)\n"
                                "nl.store(out[row, i_f], value=u, mask=valid)\n")
    assert not left, left
    assert "nl.arange" not in code and "valid" not in code
    count = "min(128, x.shape[0] - (128 * 2))"
    assert "t = nl.ndarray((128, 512), dtype=x.dtype, buffer=nl.sbuf)" in code
    assert f"nisa.dma_copy(dst=t[0:{count}, 0:512], src=x[(128 * 2):(128 * 2) + {count}, 0:0 + 512])" in code
    assert "nisa.tensor_scalar(dst=u, data=t, op0=nl.multiply, operand0=2.0)" in code
    assert f"nisa.dma_copy(dst=out[(128 * 2):(128 * 2) + {count}, 0:0 + 512], src=u[0:{count}, 0:512])" in code


def test_a_matmul_mask_goes_only_along_the_moving_free_axis():
    free, left = _migrated_body("i_f = nl.arange(512)[None, :]\n"
                                "p = nisa.nc_matmul(a, b, mask=(i_f < 300))\n")
    assert not left and "nisa.nc_matmul(dst=p, stationary=a, moving=b)" in free
    _, left = _migrated_body("i_p = nl.arange(128)[:, None]\np = nisa.nc_matmul(a, b, mask=(i_p < 64))\n")
    assert [reason.split(":")[0] for _, reason in left] == [  # the grid stays: the matmul left for a person reads it
        "nl.arange has no mechanical nki-package form here", "mask= is gone from the nki package",
        "nisa.nc_matmul returns its result in the legacy API"]


def test_the_masked_baselines_migrate_completely_and_agree():
    """adamw (ragged last row tile) and transpose_matmul (ragged last column tile): masks over nl.arange grids."""
    for name in ("adamw", "transpose_matmul"):
        source = (Path(__file__).resolve().parents[2] / "nkibench" / "kernels" / f"{name}.py").read_text()
        migration = migrate_source(source)
        assert migration.complete, (name, migration.needs_person)
        verified = verify(source, migration.source, TaskRef(name=f"{name}:small"), seeds=[12])
        assert verified.agree, (name, verified.migrated.error, verified.migrated.check_message)


def test_instructions_named_through_the_package_path_are_migrated_too():
    """The fused mamba tutorial writes `nki.isa.tensor_tensor_scan(...)`; its migration failed to run (no dst)."""
    source = textwrap.dedent('''
        import neuronxcc.nki as nki
        import neuronxcc.nki.language as nl
        from neuronxcc.nki.language import par_dim


        @nki.jit
        def kernel(x, y):
            a = nl.load(x)
            b = nl.load(y)
            s = nki.isa.tensor_tensor_scan(a, b, initial=0, op0=nl.multiply, op1=nki.language.add)
    ''')
    migration = migrate_source(source)
    assert migration.complete, migration.needs_person
    assert "import nki.isa as nisa\nimport nki\nimport nki.language as nl\nfrom nki.language import par_dim" in (
        migration.source)
    assert "nisa.tensor_tensor_scan(dst=s, data0=a, data1=b, initial=0, op0=nl.multiply, op1=nl.add)" in (
        migration.source)


def test_mgrid_indices_and_a_transposed_nl_matmul_as_the_matmul_tutorial_writes_them():
    code, left = _migrated_body("i_p, i_f = nl.mgrid[0:128, 0:512]\n"
                                "t = nl.load(x[i_p, i_f])\n"
                                "p = nl.matmul(a, t, transpose_x=True)\n"
                                "acc = nl.zeros((128, 512), dtype=nl.float32, buffer=nl.psum)\n"
                                "acc += nl.matmul(a, t, transpose_x=True)\n")
    assert not left, left
    assert "nisa.dma_copy(dst=t[0:128, 0:512], src=x[0:0 + 128, 0:0 + 512])" in code
    assert "p = nl.ndarray((a.shape[1], t.shape[1]), dtype=nl.float32, buffer=nl.psum)" in code
    assert "nisa.nc_matmul(dst=p, stationary=a, moving=t)" in code
    assert "nisa.nc_matmul(dst=acc, stationary=a, moving=t, accumulate=True)" in code


def test_an_untransposed_nl_matmul_and_nl_transpose_go_through_the_tensor_engines_transpose():
    """Attention v1: nl.matmul(x=q, y=k, transpose_x=True), nl.transpose(v) and nl.matmul(scores, v_t)."""
    code, left = _migrated_body("q = nl.matmul(x=a, y=b, transpose_x=True)\nt = nl.transpose(a)\n"
                                "p = nl.matmul(a, t, transpose_x=False)\nnl.store(out, value=p)\n")
    assert not left, left
    assert "nisa.nc_matmul(dst=q, stationary=a, moving=b)" in code
    assert ("t = nl.ndarray((a.shape[1], a.shape[0]), dtype=a.dtype, buffer=nl.sbuf)\n"
            "    t_psum = nl.ndarray((a.shape[1], a.shape[0]), dtype=a.dtype, buffer=nl.psum)\n"
            "    nisa.nc_transpose(dst=t_psum, data=a)\n    nisa.tensor_copy(dst=t, src=t_psum)") in code
    assert "p = nl.ndarray((a.shape[0], t.shape[1]), dtype=nl.float32, buffer=nl.psum)" in code
    assert "nisa.nc_transpose(dst=p_x_psum, data=a)" in code and "nisa.tensor_copy(dst=p_x, src=p_x_psum)" in code
    assert "nisa.nc_matmul(dst=p, stationary=p_x, moving=t)" in code


def test_a_matmul_with_other_keywords_is_left_for_a_person():
    _, left = _migrated_body("p = nl.matmul(a, b, transpose_x=flag)\n")
    assert [reason for _, reason in left] == ["nl.matmul has no mechanical nki-package form here"]


def test_an_index_grid_a_line_left_for_a_person_still_reads_stays_defined():
    """The softmax tutorial's migration failed with NameError: ix, dropped although nl.max(..., mask=...) kept it."""
    code, left = _migrated_body("ix = nl.arange(128)[:, None]\niy = nl.arange(512)[None, :]\n"
                                "t = nl.load(x[ix, iy])\nm = nl.softmax(t, axis=[1], mask=(ix < 64))\n")
    assert "ix = nl.arange(128)[:, None]" in code and "iy = nl.arange" not in code
    assert "nisa.dma_copy(dst=t[0:128, 0:512], src=x[0:0 + 128, 0:0 + 512])" in code
    assert [reason.split(":")[0] for _, reason in left] == [
        "nl.arange has no mechanical nki-package form here", "mask= is gone from the nki package",
        "nl.softmax has no mechanical nki-package form here"]


def test_reductions_reciprocal_and_statistics_in_return_form_get_a_dst_shaped_as_the_legacy_result():
    """The attention tutorial's softmax in nisa calls (v2 on), and layernorm v2's bn_stats / bn_aggr."""
    code, left = _migrated_body("m = nisa.tensor_reduce(op=nl.max, data=a, axis=1)\n"
                                "r = nisa.reciprocal(data=m)\n"
                                "s = nisa.tensor_scalar(data=a, op0=nl.multiply, operand0=r, dtype=nl.bfloat16)\n"
                                "st = nisa.bn_stats(a, dtype=nl.float32)\nmv = nisa.bn_aggr(st)\n")
    assert not left, left
    assert "m = nl.ndarray((a.shape[0], 1), dtype=a.dtype, buffer=nl.sbuf)" in code
    assert "nisa.tensor_reduce(dst=m, op=nl.max, data=a, axis=1)" in code
    assert "r = nl.ndarray(m.shape, dtype=m.dtype, buffer=nl.sbuf)\n    nisa.reciprocal(dst=r, data=m)" in code
    assert "s = nl.ndarray(a.shape, dtype=nl.bfloat16, buffer=nl.sbuf)" in code
    assert "nisa.tensor_scalar(dst=s, data=a, op0=nl.multiply, operand0=r)" in code
    assert "st = nl.ndarray((a.shape[0], 6), dtype=nl.float32, buffer=nl.sbuf)" in code
    assert "mv = nl.ndarray((st.shape[0], 2), dtype=st.dtype, buffer=nl.sbuf)" in code


def test_a_reduction_over_an_axis_the_line_does_not_show_to_be_the_free_one_is_left_for_a_person():
    _, left = _migrated_body("m = nisa.tensor_reduce(op=nl.max, data=a, axis=(1, 2))\n")
    assert [reason for _, reason in left] == [
        "nisa.tensor_reduce returns its result in the legacy API: give it a dst= tile"]


def test_an_annotated_assignment_is_migrated_and_the_comment_above_it_kept():
    code, left = _migrated_body("# Q @ K\nqk: nt.tensor[128, 128] = nisa.nc_matmul(stationary=a, moving=b)\n")
    assert not left, left
    assert ("# Q @ K\n    qk = nl.ndarray((a.shape[1], b.shape[1]), dtype=nl.float32, buffer=nl.psum)\n"
            "    nisa.nc_matmul(dst=qk, stationary=a, moving=b)") in code


def test_a_block_dimension_left_in_place_is_a_line_for_a_person():
    code, left = _migrated_body("t = nl.ndarray(shape=(2, nl.par_dim(128), 64), dtype=a.dtype)\n")
    line = next(n for n, text in enumerate(code.splitlines(), 1) if "nl.par_dim" in text)
    assert left == [(line, "a block dimension (nl.par_dim after the first axis), removed in the nki package: index "
                           "a Python list of tiles instead")]


def test_with_a_kernel_name_only_that_kernel_and_what_it_calls_need_a_person():
    """A tutorial file holds several kernels: the named one's report is its own, the others' lines are elsewhere."""
    source = textwrap.dedent('''
        import neuronxcc.nki as nki
        import neuronxcc.nki.language as nl


        def helper(t):
            return nl.softmax(t, axis=1)


        @nki.jit
        def first(x):
            out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            t = nl.load(x)
            helper(t)
            nl.store(out, value=t)
            return out


        @nki.jit
        def second(x):
            return nl.gelu_apprx_tanh(x)
    ''')
    line = {name: next(n for n, text in enumerate(migrate_source(source).source.splitlines(), 1) if name in text)
            for name in ("nl.softmax", "nl.gelu_apprx_tanh")}
    scoped = migrate_source(source, "first")
    assert [n for n, _ in scoped.needs_person] == [line["nl.softmax"]]
    assert [n for n, _ in scoped.elsewhere] == [line["nl.gelu_apprx_tanh"]]
    assert [n for n, _ in migrate_source(source, "second").needs_person] == [line["nl.gelu_apprx_tanh"]]


def test_a_psum_tile_stored_is_copied_to_sbuf_first_as_the_destinations_type():
    """No DMA reads PSUM; the legacy nl.store of a matmul's result copied it out itself (attention v2's failed
    to run: DMA engines cannot access PSUM)."""
    code, left = _migrated_body("p = nisa.nc_matmul(a, b)\nnl.store(out, value=p)\n")
    assert not left, left
    assert ("p_sbuf = nl.ndarray(p.shape, dtype=out.dtype, buffer=nl.sbuf)\n    nisa.tensor_copy(dst=p_sbuf, src=p)\n"
            "    nisa.dma_copy(dst=out, src=p_sbuf)") in code


def test_several_block_dimensions_become_nested_lists_of_tiles():
    """The blocked matmul tutorials and attention v3 allocate (n, m, nl.par_dim(p), f)."""
    code, left = _migrated_body("t = nl.ndarray((2, 3, nl.par_dim(128), 64), dtype=a.dtype, buffer=nl.sbuf)\n"
                                "for i in nl.affine_range(2):\n"
                                "    for j in nl.affine_range(3):\n"
                                "        t[i, j, :, :] = nl.load(x[0:128, 0:64])\n"
                                "        e = nl.exp(t[i, j])\n")
    assert not left, left
    assert "t = [[nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.sbuf) for _ in range(3)] for _ in range(2)]" in code
    assert "nisa.dma_copy(dst=t[i][j][:, :], src=x[0:128, 0:64])" in code
    assert "nisa.activation(dst=e, op=nl.exp, data=t[i][j])" in code


def test_the_dtype_of_a_block_tensor_is_its_tiles_dtype():
    """matmul_fully_optimized allocates its packed result with dtype=result_tiles.dtype (AttributeError: 'list')."""
    code, left = _migrated_body("t = nl.ndarray((2, 3, nl.par_dim(128), 64), dtype=a.dtype, buffer=nl.sbuf)\n"
                                "u = nl.ndarray((128, 64), dtype=t.dtype, buffer=nl.sbuf)\n")
    assert not left, left
    assert "u = nl.ndarray((128, 64), dtype=t[0][0].dtype, buffer=nl.sbuf)" in code


def test_legacy_tile_operators_and_broadcast_method_become_the_instructions_they_stood_for():
    """The softmax, rmsnorm and layernorm tutorials write `numerator / denominator`, `square_sum / n`,
    `t * g + b`, `acc[...] += part` and `g.broadcast_to(shape)`."""
    code, left = _migrated_body("s = nl.sum(a, axis=[1])\nq = a / s\nm = s / 64\nr = 2.0 * a + b\n"
                                "g = nl.load(y[0:1, :])\nc = g.broadcast_to((128, 512))\nr[...] += c\n")
    assert not left, left
    assert "nisa.tensor_reduce(dst=s, op=nl.add, data=a, axis=1, keepdims=True)" in code
    assert "nisa.tensor_scalar(dst=q, data=a, op0=nl.divide, operand0=s)" in code
    assert "nisa.tensor_scalar(dst=m, data=s, op0=nl.divide, operand0=64)" in code
    assert "nisa.tensor_scalar(dst=r_1, data=a, op0=nl.multiply, operand0=2.0)" in code
    assert "nisa.tensor_tensor(dst=r, data1=r_1, data2=b, op=nl.add)" in code
    assert "nisa.nc_matmul(dst=c_broadcast, stationary=c_ones, moving=g[:, c_start:c_end])" in code
    assert "nisa.tensor_tensor(dst=r[...], data1=r[...], data2=c, op=nl.add)" in code


def test_a_number_divided_by_a_tile_is_left_for_a_person():
    _, left = _migrated_body("q = 1.0 / a\nnl.store(out, value=q)\n")
    assert [reason for _, reason in left] == ["nl.store has no mechanical nki-package form here"]


def test_a_parameter_the_kernel_never_reads_as_a_tensor_and_a_size_are_scalar_operands():
    """Layernorm's `nl.rsqrt(var + epsilon)` (epsilon a kernel argument) and rmsnorm's `square_sum / x.shape[1]`."""
    source = textwrap.dedent('''
        import neuronxcc.nki as nki
        import neuronxcc.nki.language as nl


        @nki.jit
        def kernel(x, epsilon):
            out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            a = nl.load(x)
            s = nl.sum(a, axis=1)
            m = s / x.shape[1]
            r = nl.rsqrt(m + epsilon)
            nl.store(out, value=nl.multiply(a, r))
            return out
    ''')
    migration = migrate_source(source)
    assert migration.complete, migration.needs_person
    assert "nisa.tensor_scalar(dst=m, data=s, op0=nl.divide, operand0=x.shape[1])" in migration.source
    assert "nisa.tensor_scalar(dst=r_1, data=m, op0=nl.add, operand0=epsilon)" in migration.source


def test_what_one_kernel_learns_about_a_name_stays_in_that_kernel():
    """mamba v3's block tensor scanC_accum is a plain tile in v2: v2's scanC_accum[0:p, 0:n] became [0:p][0:n]."""
    source = textwrap.dedent('''
        import neuronxcc.nki as nki
        import neuronxcc.nki.language as nl


        @nki.jit
        def blocked(x):
            acc = nl.zeros((2, nl.par_dim(128), 64), dtype=x.dtype)
            return x


        @nki.jit
        def plain(x, y):
            acc = nl.zeros((nl.par_dim(128), 64), dtype=x.dtype)
            t = nl.load(y)
            acc[0:128, 0:64] += t
            return x
    ''')
    migration = migrate_source(source, "plain")
    assert "nisa.tensor_tensor(dst=acc[0:128, 0:64], data1=acc[0:128, 0:64], data2=t, op=nl.add)" in migration.source


def test_a_shared_identity_constant_is_the_shared_identity_matrix():
    """Attention v8-v11 load nl.shared_constant(np.identity(128, dtype=np.int8), dtype=v.dtype)."""
    code, left = _migrated_body("i = nl.shared_constant(np.identity(128, dtype=np.int8), dtype=a.dtype)\n"
                                "j = nl.shared_constant(np.ones((128, 128)), dtype=a.dtype)\n")
    assert "i = nl.shared_identity_matrix(n=128, dtype=a.dtype)" in code
    assert [reason for _, reason in left] == ["nl.shared_constant has no mechanical nki-package form here"]


def test_a_memset_in_its_legacy_signature_fills_a_dst_of_that_shape_and_type():
    """Legacy memset(shape, value, dtype) returns its tile; NKI 0.8's memset(dst, value) fills the dst."""
    code, left = _migrated_body("z = nisa.memset((128, 1), 0.0, nl.float32)\n"
                                "w = nisa.memset(shape=(128, 4), value=1.0, dtype=a.dtype, "
                                "engine=nisa.vector_engine)\n")
    assert not left, left
    assert "z = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)\n    nisa.memset(dst=z, value=0.0)" in code
    assert "nisa.memset(dst=w, value=1.0, engine=nisa.vector_engine)" in code


def test_a_migrated_memset_runs_and_agrees(tmp_path: Path):
    source = LEGACY.replace("import neuronxcc.nki.language as nl\n",
                            "import neuronxcc.nki.language as nl\nimport neuronxcc.nki.isa as nisa\n").replace(
        "b = nl.load(y[i * 128:(i + 1) * 128, :])", "b = nisa.memset((128, 512), 0.0, nl.float32)")
    (tmp_path / "ref.py").write_text(REFERENCE.replace("(np.exp(x) + y) * 2.0", "np.exp(x) * 2.0"))
    migration = migrate_source(source)
    assert migration.complete, migration.needs_person
    verified = verify(source, migration.source, TaskRef(reference=str(tmp_path / "ref.py")), seeds=[1])
    assert verified.agree, (verified.original.check_message, verified.migrated.check_message)


IOTA_SELECT = textwrap.dedent('''
    import neuronxcc.nki as nki
    import neuronxcc.nki.isa as nisa
    import neuronxcc.nki.language as nl


    @nki.jit
    def kernel(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        i_p = nl.arange(128)[:, None]
        i_f = nl.arange(128)[None, :]
        a = nl.load(x)
        ramp = nisa.iota(i_p * 128 + i_f + 3, dtype=nl.float32)
        causal = nisa.affine_select(i_p - i_f >= 0, a, -9984.0)
        nl.store(out, value=nl.add(causal, ramp))
        return out
''')


def test_iota_and_affine_select_over_index_grids_take_nki_08s_pattern_signature(tmp_path: Path):
    """Legacy iota(expr, dtype) and affine_select(pred, on_true_tile, on_false_value) over nl.arange grids as
    iota(dst, pattern, offset, channel_multiplier) and affine_select(dst, pattern, offset, channel_multiplier,
    on_true_tile, on_false_value, cmp_op), checked on fresh inputs against the legacy kernel."""
    migration = migrate_source(IOTA_SELECT)
    assert migration.complete, migration.needs_person
    assert "ramp = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)" in migration.source
    assert "nisa.iota(dst=ramp, pattern=[[1, 128]], offset=3, channel_multiplier=128)" in migration.source
    assert ("nisa.affine_select(dst=causal, pattern=[[-(1), 128]], offset=0, channel_multiplier=1, on_true_tile=a, "
            "on_false_value=-9984.0, cmp_op=nl.greater_equal)") in migration.source
    (tmp_path / "ref.py").write_text(textwrap.dedent('''
        import numpy as np


        def make_inputs(rng):
            return [rng.standard_normal((128, 128), dtype=np.float32)]


        def reference(x):
            rows, cols = np.indices(x.shape)
            return np.where(rows >= cols, x, -9984.0) + (rows * 128 + cols + 3)
    '''))
    verified = verify(IOTA_SELECT, migration.source, TaskRef(reference=str(tmp_path / "ref.py")), seeds=[1])
    assert verified.agree, (verified.original.check_message, verified.migrated.check_message)


def test_an_index_grid_another_kernel_still_reads_goes_from_this_one():
    """Layernorm v2 keeps i_p_io for a line left for a person; v1's own i_p_io went unused but stayed, listed."""
    source = textwrap.dedent('''
        import neuronxcc.nki as nki
        import neuronxcc.nki.language as nl


        @nki.jit
        def first(x):
            out = nl.ndarray((128, 512), dtype=x.dtype, buffer=nl.shared_hbm)
            ix = nl.arange(128)[:, None]
            iy = nl.arange(512)[None, :]
            t = nl.load(x[ix, iy])
            nl.store(out[ix, iy], value=t)
            return out


        @nki.jit
        def second(x):
            ix = nl.arange(128)[:, None]
            return nl.softmax(x, axis=1, mask=(ix < 64))
    ''')
    migration = migrate_source(source, "first")
    assert migration.complete, migration.needs_person
    assert migration.source.count("ix = nl.arange(128)[:, None]") == 1


def _agrees(tmp_path: Path, legacy: str, reference: str) -> str:
    """Migrate `legacy` completely and check both versions on the same fresh seed against `reference` (a reference
    module's text); the migrated source."""
    migration = migrate_source(legacy)
    assert migration.complete, migration.needs_person
    (tmp_path / "ref.py").write_text(textwrap.dedent(reference))
    verified = verify(legacy, migration.source, TaskRef(reference=str(tmp_path / "ref.py")), seeds=[7])
    assert verified.agree, (verified.original.check_message, verified.migrated.check_message,
                            verified.migrated.error)
    return migration.source


def test_three_dimensional_arange_grids_become_access_patterns(tmp_path: Path):
    """transpose2d's copy through 3-D grids (`t[i_p, i_f2 * X + i_f1]`): one [step, count] per grid axis."""
    code = _agrees(tmp_path, textwrap.dedent('''
        import neuronxcc.nki as nki
        import neuronxcc.nki.language as nl


        @nki.jit
        def kernel(x):
            out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            a = nl.load(x)
            i_p = nl.arange(16)[:, None, None]
            i_f1 = nl.arange(3)[None, :, None]
            i_f2 = nl.arange(4)[None, None, :]
            t = nl.ndarray((16, 12), dtype=x.dtype, buffer=nl.sbuf)
            t[i_p, i_f2 * 3 + i_f1] = nl.copy(a[i_p, i_f1 * 4 + i_f2])
            nl.store(out, value=t)
            return out
    '''), '''
        import numpy as np


        def make_inputs(rng):
            return [rng.standard_normal((16, 12), dtype=np.float32)]


        def reference(x):
            return x.reshape(16, 3, 4).transpose(0, 2, 1).reshape(16, 12)
    ''')
    assert "nl.arange" not in code
    assert ("nisa.tensor_copy(dst=t.ap(pattern=[[t.shape[1], 16], [1, 3], [3, 4]], offset=0), "
            "src=a.ap(pattern=[[a.shape[1], 16], [4, 3], [1, 4]], offset=0))") in code


def test_a_sum_over_a_five_dimensional_mgrid_is_tensor_reduce_of_its_access_pattern(tmp_path: Path):
    """average_pool2d: `nl.sum(t[i0, 2 * i1 + i2, 2 * i3 + i4], axis=[2, 4])` reduces the pooling windows."""
    code = _agrees(tmp_path, textwrap.dedent('''
        import neuronxcc.nki as nki
        import neuronxcc.nki.language as nl


        @nki.jit
        def kernel(x):
            out = nl.ndarray((4, 3, 5), dtype=x.dtype, buffer=nl.shared_hbm)
            i0, i1, i2, i3, i4 = nl.mgrid[0:4, 0:3, 0:2, 0:5, 0:2]
            a = nl.load(x)
            pooled = nl.sum(a[i0, 2 * i1 + i2, 2 * i3 + i4], axis=[2, 4]) / 4
            nl.store(out, value=pooled)
            return out
    '''), '''
        import numpy as np


        def make_inputs(rng):
            return [rng.standard_normal((4, 6, 10), dtype=np.float32)]


        def reference(x):
            return x.reshape(4, 3, 2, 5, 2).mean(axis=(2, 4))
    ''')
    assert "pooled_1 = nl.ndarray((4, 3, 5), dtype=a.dtype, buffer=nl.sbuf)" in code
    assert ("data=a.ap(pattern=[[a.shape[1] * a.shape[2], 4], [2 * a.shape[2], 3], [a.shape[2], 2], [2, 5], [1, 2]], "
            "offset=0), axis=(2, 4), keepdims=False)") in code


STATISTICS = textwrap.dedent('''
    import neuronxcc.nki as nki
    import neuronxcc.nki.isa as nisa
    import neuronxcc.nki.language as nl
    import numpy as np


    @nki.jit
    def kernel(x):
        out = nl.ndarray((128, 2), dtype=np.float32, buffer=nl.shared_hbm)
        a = nl.load(x)
        i_p = nl.arange(128)[:, None]
        i_f = nl.arange(512)[None, :]
        i_s = nl.arange(6)[None, :]
        stats = nl.ndarray((128, 12), dtype=np.float32, buffer=nl.sbuf)
        for j in nl.affine_range(2):
            stats[i_p, j * 6 + i_s] = nisa.bn_stats(a[i_p, j * 512 + i_f], mask=(j * 512 + i_f < 700),
                                                    dtype=np.float32)
        i_a = nl.arange(12)[None, :]
        mean_var = nisa.bn_aggr(stats[i_p, i_a])
        mean = mean_var[i_p, 0]
        var = mean_var[i_p, 1]
        both = nl.ndarray((128, 2), dtype=np.float32, buffer=nl.sbuf)
        both[i_p, 0] = nl.copy(mean)
        both[i_p, 1] = nl.copy(var)
        nl.store(out, value=both)
        return out
''')


def test_grid_indexed_bn_stats_take_slices_and_their_mask_bounds_the_data_it_reads(tmp_path: Path):
    """Layernorm v2's statistics: a free-axis mask on bn_stats limits the columns it reads (dropped, the second
    chunk would count columns past the row's 700); `mean_var[i_p, 0]` is a column."""
    code = _agrees(tmp_path, STATISTICS, '''
        import numpy as np


        def make_inputs(rng):
            return [rng.standard_normal((128, 700), dtype=np.float32)]


        def reference(x):
            return np.stack([x.mean(axis=1), x.var(axis=1)], axis=1)
    ''')
    assert ("nisa.bn_stats(dst=stats[0:128, j * 6:j * 6 + 6], data=a[0:128, j * 512:j * 512 + min(512, 700 - (j * "
            "512))])") in code
    assert "mean = mean_var[0:128, 0:1]" in code and "var = mean_var[0:128, 1:1 + 1]" in code


MASKED = textwrap.dedent('''
    import neuronxcc.nki as nki
    import neuronxcc.nki.isa as nisa
    import neuronxcc.nki.language as nl


    @nki.jit
    def kernel(x, y):
        out = nl.ndarray((128, 512), dtype=x.dtype, buffer=nl.shared_hbm)
        i_p = nl.arange(128)[:, None]
        i_f = nl.arange(512)[None, :]
        a = nl.load(x)
        b = nl.load(y)
        s = nl.sum(a[i_p, i_f], axis=1, mask=(i_f < 300))
        t = nl.zeros((128, 512), dtype=x.dtype, buffer=nl.sbuf)
        t[i_p, i_f] = nl.exp(a[i_p, i_f], mask=(i_f < 300))
        nl.store(out, value=nl.add(t, s))
        return out
''')


def test_masks_that_change_a_result_become_bounds_on_what_the_instruction_reads_and_writes(tmp_path: Path):
    """Dropped, these masks would change the result: a row sum would add the columns it switched off, an exp into
    part of a zeroed tile would overwrite the zeros the kernel keeps there."""
    code = _agrees(tmp_path, MASKED, '''
        import numpy as np


        def make_inputs(rng):
            return [rng.standard_normal((128, 512), dtype=np.float32) for _ in range(2)]


        def reference(x, y):
            return np.where(np.arange(512) < 300, np.exp(x), 0.0) + x[:, :300].sum(axis=1, keepdims=True)
    ''')
    assert "nisa.tensor_reduce(dst=s, op=nl.add, data=a[0:128, 0:min(512, 300)], axis=1, keepdims=True)" in code
    assert "nisa.activation(dst=t[0:128, 0:min(512, 300)], op=nl.exp, data=a[0:128, 0:min(512, 300)])" in code


def test_a_matmul_accumulating_under_a_column_mask_writes_only_those_columns(tmp_path: Path):
    """The accumulator's switched-off columns keep their zeros, as the masked legacy instruction left them. The
    simulator's legacy `acc += nisa.nc_matmul(..., mask=m)` adds those columns of the result too (undefined, NaN),
    so here the migrated kernel is checked against NumPy alone."""
    legacy = MASKED.replace('''    s = nl.sum(a[i_p, i_f], axis=1, mask=(i_f < 300))
    t = nl.zeros((128, 512), dtype=x.dtype, buffer=nl.sbuf)
    t[i_p, i_f] = nl.exp(a[i_p, i_f], mask=(i_f < 300))
    nl.store(out, value=nl.add(t, s))''', '''    acc = nl.zeros((128, 512), dtype=nl.float32, buffer=nl.psum)
    acc += nisa.nc_matmul(a[:, 0:128], b, mask=(i_f < 300))
    nl.store(out, value=nl.copy(acc))''')
    migration = migrate_source(legacy)
    assert migration.complete, migration.needs_person
    assert ("nisa.nc_matmul(dst=acc[:, 0:min(512, 300)], stationary=a[:, 0:128], moving=b[:, 0:min(512, 300)], "
            "accumulate=True)") in migration.source
    (tmp_path / "ref.py").write_text(textwrap.dedent('''
        import numpy as np


        def make_inputs(rng):
            return [rng.standard_normal((128, 512), dtype=np.float32) for _ in range(2)]


        def reference(x, y):
            return np.where(np.arange(512) < 300, x[:, :128].T @ y, 0.0)
    '''))
    verified = verify(legacy, migration.source, TaskRef(reference=str(tmp_path / "ref.py")), seeds=[7])
    assert verified.migrated.correct, verified.migrated.check_message


def test_a_free_axis_mask_on_a_reduction_of_a_whole_tile_stays_for_a_person():
    _, left = _migrated_body("i_f = nl.arange(512)[None, :]\ns = nl.sum(a, axis=1, mask=(i_f < 300))\n")
    assert [reason.split(":")[0] for _, reason in left] == [
        "nl.arange has no mechanical nki-package form here", "mask= is gone from the nki package",
        "nl.sum has no mechanical nki-package form here"]
    _, left = _migrated_body("i_f = nl.arange(512)[None, :]\ns = nisa.tensor_reduce(nl.add, a, axis=1, "
                             "mask=(i_f < 300))\n")
    assert "nisa.tensor_reduce returns its result in the legacy API: give it a dst= tile" in dict(left).values()


def test_an_element_wise_mask_goes_when_its_dst_is_a_tile_of_its_own():
    """The lanes it switches off in a fresh tile are undefined in the legacy kernel: no correct kernel reads them."""
    code, left = _migrated_body("i_f = nl.arange(512)[None, :]\nu = nl.exp(a, mask=(i_f < 300))\n")
    assert not left and "nisa.activation(dst=u, op=nl.exp, data=a)" in code


def test_a_masked_dma_into_or_out_of_a_tile_read_through_grids_bounds_it_once(tmp_path: Path):
    code = _agrees(tmp_path, textwrap.dedent('''
        import neuronxcc.nki as nki
        import neuronxcc.nki.language as nl


        @nki.jit
        def kernel(x):
            out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            i_p = nl.arange(128)[:, None]
            i_f = nl.arange(512)[None, :]
            t = nl.ndarray((128, 512), dtype=x.dtype, buffer=nl.sbuf)
            t[i_p, i_f] = nl.load(x[i_p, i_f], mask=(i_p < 100))
            nl.store(out[i_p, i_f], value=t[i_p, i_f], mask=(i_p < 100))
            return out
    '''), '''
        import numpy as np


        def make_inputs(rng):
            return [rng.standard_normal((100, 512), dtype=np.float32)]


        def reference(x):
            return x
    ''')
    assert "nisa.dma_copy(dst=t[0:min(128, 100), 0:512], src=x[0:0 + min(128, 100), 0:0 + 512])" in code
    assert "nisa.dma_copy(dst=out[0:0 + min(128, 100), 0:0 + 512], src=t[0:min(128, 100), 0:512])" in code


def test_a_mask_bounding_grid_accesses_beside_a_whole_tile_is_not_taken_for_a_bound():
    """Bounding only `a[i_p, i_f]` would leave it 300 columns wide beside the 512 of `t[...]`."""
    code, left = _migrated_body("i_p = nl.arange(128)[:, None]\ni_f = nl.arange(512)[None, :]\n"
                                "t = nl.zeros((128, 512), dtype=a.dtype, buffer=nl.sbuf)\n"
                                "t[...] = nl.exp(a[i_p, i_f], mask=(i_f < 300))\n")
    assert "mask= is gone from the nki package" in " ".join(reason for _, reason in left)
    assert "a[0:128, 0:512]" in code
