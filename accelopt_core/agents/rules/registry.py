"""The rules the optimizer knows, in their default order (memory statistics reorder them per task)."""

from __future__ import annotations

from .base import Rule
from .defer_scale import DeferRowScale
from .engine_balance import BalanceEngines
from .fill_partitions import FillPartitions
from .fuse_elementwise import FuseElementwise
from .fuse_loops import FuseLoops
from .hoist import HoistInvariant
from .interchange import InterchangeLoops
from .interleave import InterleaveIterations
from .merge_dma import MergeDma
from .shrink_blocks import ShrinkBlocks
from .tile_size import RetuneTileSize
from .unroll_jam import JamMatmulLoops


def default_rules() -> list[Rule]:
    """One instance of every rule: data-movement rules first (the baselines are mostly DMA-bound),
    then compute fusion, partition use and balancing, then tuning, then footprint."""
    return [HoistInvariant(), InterchangeLoops(), FuseElementwise(), MergeDma(), FuseLoops(), FillPartitions(),
            BalanceEngines(), JamMatmulLoops(), DeferRowScale(), InterleaveIterations(), RetuneTileSize(),
            ShrinkBlocks()]
