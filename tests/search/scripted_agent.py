"""A small real rewriter for search tests: it widens the silu baseline's free-axis tile and fuses
exp(-x) into one activation, one textual edit per plan, so the search has known wins to find."""

from __future__ import annotations

from accelopt_core.agents.base import Candidate, Draft, Proposal, SearchContext

# Proposed in this order: the widening (the win that pays in any regime: half the instructions, twice
# the bytes per DMA) comes last, so a search that remembers it evaluates it sooner than one that does not.
EDITS = [
    ("break the kernel (wrong results)", "nl.divide(tile, denominator)", "nl.multiply(tile, denominator)"),
    ("fuse exp(-x) into one activation with scale -1",
     "nl.exp(nl.negative(tile))", "nisa.activation(op=nl.exp, data=tile, scale=-1.0)"),
    ("widen the free-axis tile to 1024 columns", "tile_f = min(cols, 512)", "tile_f = min(cols, 1024)"),
    ("widen the free-axis tile to 2048 columns", "tile_f = min(cols, 1024)", "tile_f = min(cols, 2048)"),
]


class ScriptedAgent:
    name = "rule"

    def propose(self, parent: Candidate, context: SearchContext, count: int) -> list[Proposal]:
        found = [Proposal(text, "rule:scripted", (old, new)) for text, old, new in EDITS if old in parent.source]
        return found[:count]

    def recall(self, parent: Candidate, context: SearchContext, count: int) -> list[Proposal]:
        """The plans memory holds a positive lesson for, as the rule agent recalls its winning rules."""
        won = {e.plan for e in context.experiences if e.positive}
        return [p for p in self.propose(parent, context, len(EDITS)) if p.description in won][:count]

    def realize(self, parent: Candidate, proposal: Proposal, samples: int) -> list[Draft]:
        old, new = proposal.payload
        source = parent.source.replace(old, new)
        if "nisa.activation" in source and "import neuronxcc.nki.isa as nisa" not in source:
            source = source.replace("import neuronxcc.nki.language as nl",
                                    "import neuronxcc.nki.isa as nisa\nimport neuronxcc.nki.language as nl")
        return [Draft(source)]

    def summarize(self, slow: Candidate, fast: Candidate, context: SearchContext) -> str:
        return f"{fast.plan} ({slow.latency_ms / fast.latency_ms:.2f}x)"


class SleepyAgent(ScriptedAgent):
    """Proposes kernels that hang, to test cancellation of in-flight evaluations."""

    def propose(self, parent: Candidate, context: SearchContext, count: int) -> list[Proposal]:
        return [Proposal(f"hang variant {i}", "rule:sleepy", i) for i in range(count)]

    def realize(self, parent: Candidate, proposal: Proposal, samples: int) -> list[Draft]:
        hang = f"    import time\n    time.sleep(30 + {proposal.payload})\n    return out"
        return [Draft(parent.source.replace("    return out", hang))]
