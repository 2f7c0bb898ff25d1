"""~100k varied, realistic memory keys for retrieval benchmarks, and their MiniLM embeddings cached on disk.

Texts are templates × vocabulary (game situations, tasks, questions), drawn without repetition with a fixed seed, so
every run embeds the same texts. Embedding 100k texts with MiniLM on one thread takes minutes (≈ 2 s per 1,000 on an
idle core), so vectors are cached in chunks of 10,000 under ~/.cache/ttlearn/bench/ and a killed run resumes.
"""

from __future__ import annotations

import string
import time

import numpy as np

from ttlearn.llm.base import cache_root

TEMPLATES = [
    "{verb} the {adj} {noun} {prep} the {place} {when}",
    "How do I {verb} a {noun} in the {place} when the {noun2} is {adj}?",
    "Minesweeper {rows}x{cols} board, {mines} mines: {opened} cells open, the {corner} corner {state}",
    "Sokoban, {rows}x{cols} grid with {boxes} boxes and {goals} goals; the player stands {side} of a box next to "
    "{feature}",
    "{person} wants to {goal} near the {place} {when}, but {obstacle}",
    "Rock-paper-scissors, round {round} of {rounds}: the opponent {habit} after {streak}; I am {score}",
    "Write a {lang} function that {task} for a list of {adj} {noun}s and {constraint}",
]
VOCAB = {
    "verb": "move open sort repair paint stack push clean measure label hide fold carry balance rotate".split(),
    "adj": "red heavy broken small hidden wooden fragile frozen narrow old bright wet locked empty tall".split(),
    "noun": "box crate lamp chair key ladder door mirror table window barrel cable bottle basket rope".split(),
    "noun2": "floor light battery handle lid wall switch gate pipe belt".split(),
    "prep": "into onto behind under beside across through".split(),
    "place": "kitchen garage corridor warehouse attic office garden basement harbour library station market".split(),
    "when": ["before noon", "at night", "tomorrow", "after the storm", "during the meeting", "this weekend", "now"],
    "rows": [str(n) for n in range(5, 17)],
    "cols": [str(n) for n in range(5, 17)],
    "mines": [str(n) for n in range(3, 41)],
    "opened": [str(n) for n in range(0, 60, 3)],
    "corner": "top-left top-right bottom-left bottom-right".split(),
    "state": ["is still closed", "was revealed", "is flagged", "shows a 1", "shows a 3"],
    "boxes": [str(n) for n in range(1, 7)],
    "goals": [str(n) for n in range(1, 7)],
    "side": "left right above below".split(),
    "feature": ["a wall", "a goal square", "another box", "a corner", "an open corridor", "the edge of the map"],
    "person": "Alice Bob Chen Dana Emil Farah Goran Hana Ivan Julia Kofi Lena".split(),
    "goal": ["rent a flat", "open a shop", "learn to cook", "find a job", "train for a race", "plant a garden"],
    "obstacle": [
        "the budget is small",
        "the forms are missing",
        "the weather is bad",
        "a friend is ill",
        "the train is late",
        "the shop is closed",
        "prices went up",
    ],
    "habit": [
        "repeats its last move",
        "copies my last move",
        "plays what beats my last move",
        "cycles rock paper scissors",
        "plays rock more often",
        "switches after a loss",
        "never plays the same move twice",
    ],
    "streak": [f"{n} {outcome}" for n in range(1, 6) for outcome in ("wins", "losses", "draws")],
    "round": [str(n) for n in range(1, 31)],
    "rounds": ["10", "20", "50", "100"],
    "score": [f"{side} by {n}" for side in ("ahead", "behind") for n in range(1, 10)] + ["level"],
    "lang": "Python Rust Go Java C TypeScript".split(),
    "task": [
        "removes duplicates",
        "finds the median",
        "counts the vowels",
        "merges sorted runs",
        "reverses every word",
        "groups items by length",
        "returns the longest run",
        "checks for balanced brackets",
        "rotates by k places",
    ],
    "constraint": [
        "runs in linear time",
        "keeps the original order",
        "handles empty input",
        "uses no extra memory",
        "raises ValueError on bad input",
        "works for negative numbers",
    ],
}
CHUNK = 10_000


def varied_texts(n: int, seed: int = 0) -> list[str]:
    """n distinct texts: a random template filled with random vocabulary, repeats skipped (fixed seed, so the first
    m texts of any longer list are the same)."""
    rng = np.random.default_rng(seed)
    slots = [[name for _, name, _, _ in string.Formatter().parse(t) if name] for t in TEMPLATES]
    seen: set[str] = set()
    texts: list[str] = []
    while len(texts) < n:
        which = int(rng.integers(len(TEMPLATES)))
        text = TEMPLATES[which].format(**{name: VOCAB[name][rng.integers(len(VOCAB[name]))] for name in slots[which]})
        if text not in seen:
            seen.add(text)
            texts.append(text)
    return texts


def minilm_vectors(n: int, seed: int = 0) -> np.ndarray:
    """MiniLM embeddings of `varied_texts(n, seed)`, computed once per chunk and cached."""
    from ttlearn.memory.embed import make_embedder

    texts = varied_texts(n, seed)
    folder = cache_root() / "bench" / f"minilm-varied-texts-s{seed}"
    folder.mkdir(parents=True, exist_ok=True)
    embedder = None
    chunks = []
    for lo in range(0, n, CHUNK):
        path = folder / f"{lo:07d}.npy"
        batch = texts[lo : lo + CHUNK]
        if path.exists() and len(cached := np.load(path)) >= len(batch):
            chunks.append(cached[: len(batch)])
            continue
        embedder = embedder or make_embedder("minilm")
        start = time.perf_counter()
        by_length = np.argsort([len(t) for t in batch], kind="stable")  # batches of similar length pad less
        vectors = np.empty((len(batch), embedder.dim), dtype=np.float32)
        vectors[by_length] = embedder.embed([batch[i] for i in by_length])
        print(f"embedded texts {lo:,}–{lo + len(batch):,} in {time.perf_counter() - start:.0f} s", flush=True)
        np.save(path, vectors)
        chunks.append(vectors)
    return np.concatenate(chunks)
