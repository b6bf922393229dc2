"""The optimization memory (AccelOpt): kernels by content hash, cached profiles, search records that let
a killed search resume, and the slow -> fast experiences the planner learns from, in one SQLite file."""

from .experiences import NEGATIVE_SLOWDOWN, POSITIVE_SPEEDUP, Experience, RuleStats, classify
from .paths import default_path
from .profile_cache import ProfileCache, check_mode
from .schema import SCHEMA_VERSION, SchemaError
from .search_memory import SearchMemory
from .searches import CandidateRecord, SearchInfo, SearchState
from .store import Memory, source_hash
from .transfer import ImportFormatError

__all__ = [
    "NEGATIVE_SLOWDOWN",
    "POSITIVE_SPEEDUP",
    "SCHEMA_VERSION",
    "CandidateRecord",
    "Experience",
    "ImportFormatError",
    "Memory",
    "ProfileCache",
    "RuleStats",
    "SchemaError",
    "SearchInfo",
    "SearchMemory",
    "SearchState",
    "check_mode",
    "classify",
    "default_path",
    "source_hash",
]
