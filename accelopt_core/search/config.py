"""Search settings: the paper's beam search shape and smaller presets for an editor."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class SearchConfig:
    """Beam width B, plans per candidate N, executor samples per plan K, iterations T (paper:
    6, 12, 2, 16), parallel evaluations, when to stop early, how far memory replay may go, and a
    wall-clock budget: after the first wave of candidates, no evaluation starts that would not end
    within it (None: no limit). Kernels
    whose every check simulates full-size data take minutes per candidate, so the budget, not T,
    decides how much of the search runs; plans go best first, so it is the least promising that
    are left out. There `screen` times each candidate unchecked first (seconds) and checks it (minutes)
    only if it is fast enough to enter the beam, the fastest first."""

    beam_width: int = 6
    plans_per_candidate: int = 12
    samples_per_plan: int = 2
    iterations: int = 16
    workers: int = max(1, os.cpu_count() or 1)
    patience: int = 3  # iterations without a better kernel before stopping early (0: never)
    replay_steps: int = 8  # remembered wins to chain before the first iteration (0: no memory replay)
    seeds: int = 5
    time_budget_s: float | None = None
    screen: bool = True  # where checks are full-size: time each kernel unchecked, check only beam entrants


PRESETS: dict[str, SearchConfig] = {
    "paper": SearchConfig(),
    # an editor's search: done in under 10 minutes on 2 cores
    "default": SearchConfig(beam_width=4, plans_per_candidate=8, samples_per_plan=1, iterations=8, time_budget_s=540),
    "quick": SearchConfig(beam_width=2, plans_per_candidate=4, samples_per_plan=1, iterations=4, patience=2,
                          time_budget_s=300),
}


def describe_presets() -> str:
    """Each preset's size in the paper's letters, for `--help`: `quick (B=2 N=4 K=1 T=4, 300 s budget)`."""
    def sizes(config: SearchConfig) -> str:
        budget = f", {config.time_budget_s:.0f} s budget" if config.time_budget_s else ", no time budget"
        return (f"B={config.beam_width} N={config.plans_per_candidate} K={config.samples_per_plan} "
                f"T={config.iterations}{budget}")
    return "; ".join(f"{name} ({sizes(config)})" for name, config in reversed(PRESETS.items()))


def preset(name: str, **overrides: float | None) -> SearchConfig:
    """A named preset with some fields replaced; ValueError naming the presets for a bad name."""
    if name not in PRESETS:
        raise ValueError(f"unknown search preset {name!r}; presets: {', '.join(PRESETS)}")
    return replace(PRESETS[name], **{k: v for k, v in overrides.items() if v is not None})
