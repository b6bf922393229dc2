"""The rule-based optimizer: real source-to-source rewrites of NKI kernels with libcst.

Each rule is a planner (`plan`: does it apply to this kernel, and where, judged from the source
and its profile) and an executor (`apply`: the rewritten kernel, formatting and comments kept).
"""

from .base import Plan, Rule, RuleError

__all__ = ["Plan", "Rule", "RuleError"]
