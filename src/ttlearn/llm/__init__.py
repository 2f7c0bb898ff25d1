"""LLM back ends behind one protocol; `make_llm(spec)` builds one from a spec string."""

from ttlearn.llm.base import LLM, LLMS, LLMError, Message, make_llm

__all__ = ["LLM", "LLMS", "LLMError", "Message", "make_llm"]
