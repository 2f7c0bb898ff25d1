"""Memory methods. Each module registers its class in `MEMORIES`; `make_memory` builds one by name."""

from ttlearn.memory.base import MEMORIES, Memory, make_memory

__all__ = ["MEMORIES", "Memory", "make_memory"]
