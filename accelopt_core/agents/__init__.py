"""Planners and executors that propose and write kernel rewrites: built-in rules (libcst) and,
with a model configured, LLM agents."""
