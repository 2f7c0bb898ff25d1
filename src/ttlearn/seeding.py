"""Every random choice in ttlearn draws from a seed derived from its position, never from the order of earlier calls:
(run seed, game, step) for a decision, (run seed, task) for an instance. A resumed or concurrent run therefore plays
exactly what an uninterrupted sequential one would have played."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def derive_seed(*parts: Any) -> int:
    """A 31-bit seed from any tuple of JSON-able values, stable across processes and Python versions."""
    digest = hashlib.sha256(json.dumps(parts).encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF
