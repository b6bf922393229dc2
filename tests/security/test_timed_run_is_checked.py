"""A kernel that is right at the size it is checked and cheats at the size it is timed gains nothing:
the search checks every kernel it keeps at the size it was timed."""

from __future__ import annotations

import sys
from pathlib import Path

from accelopt_core.agents.base import Candidate, Draft, Proposal, SearchContext
from accelopt_core.memory import Memory
from accelopt_core.profiling import SimulatorProfiler, TaskRef
from accelopt_core.search import BeamSearch, SearchConfig
from accelopt_core.tasks.registry import task_files

sys.path.insert(0, str(Path(__file__).parent.parent / "search"))
from scripted_agent import ScriptedAgent

SILU = Path(task_files("silu").kernel).read_text()
HONEST = ("            denominator = nl.add(nl.exp(nl.negative(tile)), 1.0)\n"
          "            result = nl.divide(tile, denominator)\n")
# right on the small variant (256 rows), a cheaper wrong formula at the timed size (4096 rows)
SIZE_CHEAT = ("            if rows > 256:\n                result = nl.multiply(tile, 0.5)\n"
              "            else:\n" + HONEST.replace("            ", "                "))


class SizeCheatingAgent(ScriptedAgent):
    """Offers one rewrite: the size-branching cheat."""

    def propose(self, parent: Candidate, context: SearchContext, count: int) -> list[Proposal]:
        return [Proposal("cheat at the timed size", "rule:cheat", None)] if HONEST in parent.source else []

    def realize(self, parent: Candidate, proposal: Proposal, samples: int) -> list[Draft]:
        return [Draft(parent.source.replace(HONEST, SIZE_CHEAT))]


def test_the_timed_size_is_checked_before_a_kernel_is_kept(tmp_path: Path) -> None:
    profiler = SimulatorProfiler(seeds=1, check_variant="small")
    small = profiler.profile(SILU.replace(HONEST, SIZE_CHEAT), TaskRef("silu"))
    honest = profiler.profile(SILU, TaskRef("silu"))
    assert small.correct is True and small.latency_ms < honest.latency_ms  # the small check alone is fooled
    config = SearchConfig(beam_width=2, plans_per_candidate=1, samples_per_plan=1, iterations=1, workers=2, seeds=1)
    with Memory(tmp_path / "m.db") as memory:
        result = BeamSearch(profiler, [SizeCheatingAgent()], config, memory).run(SILU, TaskRef("silu"), "trn1",
                                                                                "elementwise")
        assert "if rows > 256" not in result.best.source and result.best.result.correct
        cheat = next(c for c in result.beam + list(memory.search_state(result.search_id).candidates)
                     if getattr(c, "plan", "") == "cheat at the timed size")
        assert getattr(cheat, "status", "incorrect") == "incorrect"
        assert not [e for e in memory.top_experiences("elementwise", "trn1") if e.positive]
