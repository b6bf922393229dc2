"""AccelOpt's LLM agents (planner, executor, summarizer, fixer) over any OpenAI-compatible endpoint."""

from .agent import LLMAgent, LLMPlan, Note
from .client import Budget, BudgetExceeded, Completion, LLMClient, LLMError, LLMFatalError, Usage
from .parsing import CodeReply, PlanReply, extract_code, extract_lesson, extract_plan

__all__ = [
           "Budget",
           "BudgetExceeded",
           "CodeReply",
           "Completion",
           "LLMAgent",
           "LLMClient",
           "LLMError",
           "LLMFatalError",
           "LLMPlan",
           "Note",
           "PlanReply",
           "Usage",
           "extract_code",
           "extract_lesson",
           "extract_plan",
]
