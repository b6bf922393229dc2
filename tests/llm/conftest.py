"""Fixtures for the LLM agent tests (the fake OpenAI-compatible server lives in llm_fakes.py)."""

from llm_fakes import fake_llm

__all__ = ["fake_llm"]
