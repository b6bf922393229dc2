"""Analytical Trainium performance model over simulator instruction traces."""

from accelopt_core.perfmodel.costs import CostModel, DmaCost
from accelopt_core.perfmodel.estimate import estimate
from accelopt_core.perfmodel.report import PerfReport, peak_percent, peak_times

__all__ = ["CostModel", "DmaCost", "PerfReport", "estimate", "peak_percent", "peak_times"]
