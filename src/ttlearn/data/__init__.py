"""Data sets built once into the cache ($TTLEARN_CACHE/data) and checked against their manifest on every load."""
