"""A file of several `@nki.jit` kernels checked against one reference (named with a size variant,
`ref.py:small`) gets a lens over every kernel; each kernel is profiled on request and its result is kept
and shown over it while another kernel is profiled."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from lsp_client import apply_edit, line_of, running_server, wait_for

pytestmark = pytest.mark.asyncio

TWO_KERNELS = textwrap.dedent('''\
    # accelopt: reference=silu_ref.py:small
    import neuronxcc.nki as nki
    import neuronxcc.nki.language as nl


    @nki.jit
    def silu_two_step(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        for r in nl.affine_range(x.shape[0] // 128):
            tile = nl.load(x[r * 128:(r + 1) * 128, :])
            nl.store(out[r * 128:(r + 1) * 128, :], value=nl.multiply(tile, nl.sigmoid(tile)))
        return out


    @nki.jit
    def silu_fused(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        for r in nl.affine_range(x.shape[0] // 128):
            tile = nl.load(x[r * 128:(r + 1) * 128, :])
            nl.store(out[r * 128:(r + 1) * 128, :], value=nl.silu(tile))
        return out
''')

REFERENCE = textwrap.dedent('''\
    import numpy as np

    VARIANTS = {"full": {"rows": 2048}, "small": {"rows": 256}}


    def make_inputs(rng, rows):
        return [rng.standard_normal((rows, 512), dtype=np.float32)]


    def reference(x):
        return x / (1.0 + np.exp(-x))
''')


async def _titles_by_line(editor, uri: str) -> dict[int, list[str]]:  # type: ignore[no-untyped-def]
    """1-based line -> the titles of the lenses over it."""
    out: dict[int, list[str]] = {}
    for lens in await editor.lenses(uri):
        if lens.command:
            out.setdefault(lens.range.start.line + 1, []).append(lens.command.title)
    return out


async def test_every_kernel_of_a_file_gets_a_lens_and_keeps_its_result(workspace: Path, memory_db: Path) -> None:
    (workspace / "silu_ref.py").write_text(REFERENCE)
    two_step, fused = line_of(TWO_KERNELS, "def silu_two_step"), line_of(TWO_KERNELS, "def silu_fused")
    async with running_server(workspace, memory_db) as editor:
        uri = editor.open(workspace / "silu_variants.py", TWO_KERNELS)
        several = await wait_for(lambda: editor.diagnostics(uri, "several-kernels"), 10, what="the kernels hint")
        assert "2 kernels in this file (silu_two_step, silu_fused)" in several[0].message
        assert await _titles_by_line(editor, uri) == {two_step: ["AccelOpt: profile this kernel"],
                                                      fused: ["AccelOpt: profile this kernel"]}
        picks = await editor.actions(uri, several[0].range.start.line + 1, several)
        assert [a.title.split(" (")[0] for a in picks] == ["Profile kernel `silu_two_step`",
                                                           "Profile kernel `silu_fused`"]
        assert picks[1].edit is not None and apply_edit(TWO_KERNELS, picks[1].edit, uri).startswith(
            "# accelopt: reference=silu_ref.py:small kernel=silu_fused\n")

        assert (await editor.command("accelopt.profile", uri, None, "silu_two_step"))["kernel"] == "silu_two_step"
        report = await editor.profiled(uri)
        assert report["kernel"] == "silu_two_step" and report["result"]["correct"] is True
        assert report["task"] == "silu_ref.py:small"  # timed at the small size the directive names
        titles = await _titles_by_line(editor, uri)
        assert "· simulated trn1 ·" in titles[two_step][0] and "Optimize" in titles[two_step]
        assert titles[fused] == ["AccelOpt: profile this kernel"]

        await editor.command("accelopt.profile", uri, None, "silu_fused")
        report = await wait_for(lambda: _profile_of(editor, uri, "silu_fused"), 90, 0.1, "silu_fused's profile")
        assert report["result"]["correct"] is True
        titles = await _titles_by_line(editor, uri)
        assert "Optimize" in titles[fused] and "Optimize" not in titles[two_step]
        kept = titles[two_step]
        assert len(kept) == 1 and "· simulated trn1 ·" in kept[0] and kept[0].endswith("· profile this kernel")
        assert not editor.diagnostics(uri, "several-kernels")
        unknown = await editor.command("accelopt.profile", uri, None, "no_such_kernel")
        assert "no kernel named 'no_such_kernel'" in unknown["error"]


async def _profile_of(editor, uri: str, kernel: str):  # type: ignore[no-untyped-def]
    """The checked profile of `kernel`, once the server shows it."""
    report = await editor.profiled(uri)
    return report if report["kernel"] == kernel and report["result"]["correct"] is not None else None
