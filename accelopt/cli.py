"""`accelopt` (also `python -m accelopt`): the engine's commands plus `lsp` and `bench`."""

from __future__ import annotations

from collections.abc import Sequence

from accelopt_core.cli import FrontEnd
from accelopt_core.cli import main as engine_main
from nkibench.bench import HELP as BENCH_HELP
from nkibench.bench import main as bench_main
from server.__main__ import HELP as LSP_HELP
from server.__main__ import main as lsp_main

FRONT_ENDS = (FrontEnd("bench", BENCH_HELP, bench_main), FrontEnd("lsp", LSP_HELP, lsp_main))


def main(argv: Sequence[str] | None = None) -> int:
    return engine_main(argv, FRONT_ENDS)
