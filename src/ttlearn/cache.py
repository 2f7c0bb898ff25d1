"""Where ttlearn keeps what it builds once: converted and assembled models, runtime probes, prepared data sets."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """$TTLEARN_CACHE, default ~/.cache/ttlearn."""
    return Path(os.environ.get("TTLEARN_CACHE", Path.home() / ".cache" / "ttlearn"))
