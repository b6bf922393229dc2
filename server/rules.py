"""Rule-based quick fixes: the engine's rewrite rules, asked where they apply to a kernel and what the
rewritten kernel would be. Unverified (nothing is run): verified rewrites come from Optimize."""

from __future__ import annotations

import importlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from accelopt_core.profiling import ProfileResult

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class QuickFix:
    """One rule's plan for one place in the kernel, with the source it would produce."""

    rule: str
    line: int  # 1-based
    description: str
    priority: float
    key: str
    new_source: str


def load_rules() -> list[Any] | None:
    """The engine's default rules, or None while that part of the engine is not installed: the server
    must start and profile without it."""
    try:
        registry = importlib.import_module("accelopt_core.agents.rules.registry")
    except ImportError:
        return None
    try:
        return list(registry.default_rules())
    except Exception:  # a broken rule set must not take the server down
        log.exception("loading the rewrite rules failed")
        return None


class RuleFixes:
    """Plans from every rule, best first, each with the source its rewrite produces. The rules are
    loaded on first use (the engine's default set, or factories named in `specs`)."""

    def __init__(self, rules: Sequence[Any] | None = None, specs: Sequence[str] = ()):
        self._rules = list(rules) if rules is not None else None
        self._loaded = rules is not None
        self._specs = list(specs)

    @property
    def rules(self) -> list[Any]:
        if not self._loaded:
            self._loaded = True
            if self._specs:
                from .plugins import load

                try:
                    self._rules = load(self._specs)
                except Exception:
                    log.exception("loading the quick-fix rules %s failed", self._specs)
                    self._rules = []
            else:
                self._rules = load_rules()
        return self._rules or []

    def plan(self, source: str, profile: ProfileResult | None, limit: int) -> list[QuickFix]:
        """Runs in a server thread: parsing and rewriting source with libcst never executes the kernel."""
        plans = []
        for rule in self.rules:
            try:
                plans.extend((rule, plan) for plan in rule.plan(source, profile))
            except Exception:
                log.exception("rule %s failed to plan", getattr(rule, "name", rule))
        plans.sort(key=lambda item: -float(getattr(item[1], "priority", 0.0)))
        fixes: list[QuickFix] = []
        seen: set[str] = set()
        for rule, plan in plans:
            if len(fixes) >= limit:
                break
            try:
                new_source = rule.apply(source, plan)
            except Exception as exc:  # RuleError: the plan does not fit after all
                log.debug("rule %s could not apply %s: %s", plan.rule, plan.key, exc)
                continue
            if new_source == source or new_source in seen:
                continue
            seen.add(new_source)
            fixes.append(QuickFix(plan.rule, int(plan.line), plan.description, float(plan.priority), plan.key,
                                  new_source))
        return fixes
