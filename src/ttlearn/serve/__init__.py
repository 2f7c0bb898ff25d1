"""The memory service: MemRL's store over HTTP for deployed agents (`ttlearn serve`; needs the `serve` extra)."""
