"""End to end over stdio: a legacy kernel is offered "Migrate to NKI 0.8" once the worker has migrated it and run
both versions; applying it gives a kernel on the nki package that profiles correct."""

from __future__ import annotations

from pathlib import Path

import pytest
from lsp_client import SMALL_SILU, apply_edit, line_of, running_server, wait_for
from lsprotocol import types

pytestmark = pytest.mark.asyncio


async def test_a_legacy_kernel_gets_a_verified_migration_action(workspace: Path, memory_db: Path) -> None:
    async with running_server(workspace, memory_db) as editor:
        uri = editor.open(workspace / "silu_small.py", SMALL_SILU)
        await editor.profiled(uri)
        def_line = line_of(SMALL_SILU, "def kernel")

        async def migration() -> types.CodeAction | None:
            found = await editor.actions(uri, def_line)
            return next((a for a in found if a.title.startswith("Migrate to NKI 0.8")), None)

        action = await wait_for(migration, 120, what="the migration action")
        assert "both correct on the same seeds" in action.title and "(simulated trn2)" in action.title
        assert action.kind == types.CodeActionKind.RefactorRewrite and action.edit is not None
        migrated = apply_edit(SMALL_SILU, action.edit, uri)
        assert "neuronxcc" not in migrated and "nisa.dma_copy(" in migrated
        editor.change(uri, migrated)
        editor.save(uri)
        report = await editor.profiled(uri)
        assert report["result"]["correct"] is True and report["result"]["nki_api"].startswith("NKI 0.")
        assert not [a for a in await editor.actions(uri, def_line) if a.title.startswith("Migrate to NKI 0.8")]
