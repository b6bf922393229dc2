"""AccelOpt's beam search over kernel rewrites, with progress events, cancellation and resume."""

from .beam import BeamSearch, IterationRecord, SearchError, SearchResult
from .config import PRESETS, SearchConfig, preset
from .events import SearchEvent

__all__ = ["PRESETS", "BeamSearch", "IterationRecord", "SearchConfig", "SearchError", "SearchEvent",
           "SearchResult", "preset"]
