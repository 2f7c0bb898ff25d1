"""Durable files: append-only JSON lines that a kill leaves readable (a torn last line at worst), and memory states
stored once by content, so that a run resumes exactly and a long carried memory costs what changed per unit."""

from __future__ import annotations

import gzip
import hashlib
import json
import lzma
import os
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Callable, Mapping, Sequence

from ttlearn.untrusted import (
    MAX_DEPTH,
    MAX_DOCUMENT_BYTES,
    MAX_INFLATED_BYTES,
    UntrustedFileError,
    lines,
    loads,
    open_regular,
)


def canonical_hash(data: Any) -> str:
    blob = json.dumps(data, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


PACKERS: dict[str, Callable[[IO[bytes]], IO[bytes]]] = {
    ".gz": lambda raw: gzip.GzipFile(fileobj=raw),
    ".xz": lambda raw: lzma.LZMAFile(raw),
}
"""The suffixes of a records file committed compressed (read only), and how each is read: gzip, or xz where gzip
would pass the 1 MB a committed file may weigh (an LLM run's records compress about 3.5 times smaller)."""


def append_durable(path: Path, records: Sequence[dict[str, Any]]) -> None:
    """Append records as JSON lines in one write, flushed and fsynced: a crash leaves whole lines plus at most one
    torn last line, which `read_durable` skips. Only to a regular file with one link (`open_regular`)."""
    block = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    with open_regular(path, "ab") as fh:
        fh.write(block.encode("utf-8"))
        fh.flush()
        os.fsync(fh.fileno())


def read_durable(
    path: Path, *, repair: bool, ends_block: Callable[[dict[str, Any]], bool] = lambda record: True
) -> list[dict[str, Any]]:
    """The records of an append-only JSON-lines file up to its last complete block (a block ends with a record for
    which `ends_block` holds). A torn or unfinished tail is skipped, and cut off when `repair` — only the writer
    may repair: a reader of a live run would cut a block being appended. Lines and nesting are bounded
    (`ttlearn.untrusted`); a line that is not a JSON object is an error naming it. A compressed file (`PACKERS`, a
    committed result) is read the same way, inflated to at most MAX_INFLATED_BYTES, and never repaired."""
    records: list[dict[str, Any]] = []
    kept, good_end, offset = 0, 0, 0
    packer = PACKERS.get(Path(path).suffix)
    packed = packer is not None
    with open_regular(path) as raw, packer(raw) if packer else raw as fh, _whole_packed(path):
        for number, line in enumerate(lines(fh, path), start=1):
            offset += len(line)
            if packed and offset > MAX_INFLATED_BYTES:
                raise UntrustedFileError(f"{path} inflates to more than {MAX_INFLATED_BYTES >> 20} MiB; refused")
            if not line.endswith(b"\n"):
                break
            try:
                record = loads(line, f"{path}:{number}")
            except json.JSONDecodeError:
                break
            if not isinstance(record, dict):
                raise UntrustedFileError(f"{path}:{number}: a record must be a JSON object; refused")
            records.append(record)
            if ends_block(record):
                kept, good_end = len(records), offset
        size = offset if packed else os.fstat(fh.fileno()).st_size
    if repair and not packed and good_end < size:
        with open_regular(path, "r+b") as fh:
            fh.truncate(good_end)
    return records[:kept]


@contextmanager
def _whole_packed(path: Path) -> Iterator[None]:
    """A compressed stream that is cut or corrupt is one line naming the file, not a traceback."""
    try:
        yield
    except (EOFError, zlib.error, gzip.BadGzipFile, lzma.LZMAError) as exc:
        raise UntrustedFileError(f"{path} is not a whole compressed file ({exc}); refused") from None


# ---- memory snapshots, stored once by content ----------------------------------------------------------------------
CHUNK = 64
"""Element references per stored piece of a list."""
CHUNKS = "$chunks"
"""The key of a list stored as pieces (the only key of its dict)."""
ELEMENT_WEIGHT = 64
"""What one element (a list, a dict, a number, a string) of an expanded state weighs against the limit, in characters:
about what it costs a reader as a Python object, in JSON text and in a diff line. Text weighs its characters."""
MAX_EXPANDED = MAX_DOCUMENT_BYTES
"""The most a snapshot's state may weigh expanded (elements × ELEMENT_WEIGHT + characters of text and keys): as much
as a whole document may hold, so at most a million elements, or 64 M characters of (shared) text. Pieces are
shared, so a crafted store of a few KB could otherwise expand to gigabytes; under the limit every reader (fork, diff,
resume) ends in seconds. The largest committed state weighs 0.12 M (an SQL run's memory, results/)."""


def expanded_size(objects: Mapping[str, Any], key: str, where: Path) -> int:
    """The weight of the state stored under `key` once its pieces are expanded (each element ELEMENT_WEIGHT, each
    character of text or of a key 1), checking that the pieces form a DAG (no cycle, no missing piece) whose
    expansion nests no deeper than MAX_DEPTH and weighs no more than MAX_EXPANDED; each error one line naming the
    file. A piece and a reference list are each measured once, so a shared one costs its weight on every use without
    being walked again: the work is linear in the stored text, and a list of n references to a list of n pieces weighs
    n² elements without n² of anything being built."""
    measured: dict[str, tuple[int, int] | None] = {}  # piece → (weight, height); None while being measured
    listed: dict[str, tuple[int, int]] = {}  # reference list → (weight, height) of the pieces it names

    def refs(value: Any) -> list[str]:
        if not isinstance(value, list) or not all(isinstance(r, str) for r in value):
            raise UntrustedFileError(f"{where}: a {CHUNKS} reference list must hold hashes; refused")
        missing = [r for r in value if r not in objects]
        if missing:
            raise UntrustedFileError(f"{where}: piece {missing[0][:12]} is missing; refused")
        return value

    def piece(ref: str, depth: int) -> tuple[int, int]:
        if ref in measured:
            found = measured[ref]
            if found is None:
                raise UntrustedFileError(f"{where}: the pieces of a snapshot form a cycle at {ref[:12]}; refused")
        else:
            measured[ref] = None
            measured[ref] = found = measure(objects[ref], depth)
        if depth + found[1] > MAX_DEPTH:
            raise UntrustedFileError(f"{where}: a snapshot nests deeper than {MAX_DEPTH} levels; refused")
        return found

    def chunk(ref: str, depth: int) -> tuple[int, int]:
        if ref not in listed:
            parts = [piece(e, depth) for e in refs(objects[ref])]
            listed[ref] = checked(sum(p[0] for p in parts), max((p[1] for p in parts), default=0))
        return listed[ref]

    def checked(weight: int, height: int) -> tuple[int, int]:
        if weight > MAX_EXPANDED:
            raise UntrustedFileError(
                f"{where}: a snapshot expands to more than {MAX_EXPANDED:,} (elements weigh {ELEMENT_WEIGHT} "
                "characters each); refused"
            )
        return weight, height

    def measure(value: Any, depth: int) -> tuple[int, int]:
        if depth > MAX_DEPTH:
            raise UntrustedFileError(f"{where}: a snapshot nests deeper than {MAX_DEPTH} levels; refused")
        keys = 0
        if isinstance(value, dict) and CHUNKS in value:
            parts = [chunk(c, depth + 1) for c in refs(value[CHUNKS])]
        elif isinstance(value, dict):
            parts, keys = [measure(v, depth + 1) for v in value.values()], sum(len(str(k)) for k in value)
        elif isinstance(value, list):
            parts = [measure(v, depth + 1) for v in value]
        else:
            return ELEMENT_WEIGHT + (len(value) if isinstance(value, str) else 0), 0
        return checked(ELEMENT_WEIGHT + keys + sum(p[0] for p in parts), 1 + max((p[1] for p in parts), default=0))

    if key not in objects:
        raise FileNotFoundError(f"no memory snapshot {key[:12]} in {where}")
    return piece(key, 0)[0]


class SnapshotStore:
    """Memory states stored once by content in one append-only JSON-lines file of {"hash", "value"} objects.

    A state is stored under its `canonical_hash`. Every list that holds text or containers is split: each element
    is an object of its own, and the list becomes {"$chunks": [...]}, references to pieces of up to CHUNK element
    references. Consecutive states of a carried memory share all but the few items a task added or updated, so
    storing a state after every task costs what changed, not the whole memory again: a long carried run grows
    linearly instead of quadratically. Numeric lists (an RNG's state) stay inline.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._objects: dict[str, Any] | None = None
        self._repaired = False

    def _read(self, repair: bool) -> dict[str, Any]:
        if self._objects is None or (repair and not self._repaired):
            found = read_durable(self.path, repair=repair) if self.path.exists() else []
            if any(not isinstance(r.get("hash"), str) or "value" not in r for r in found):
                raise UntrustedFileError(f"{self.path}: a record without a string hash and a value; refused")
            self._objects, self._repaired = {r["hash"]: r["value"] for r in found}, repair
        return self._objects

    def put(self, state: dict[str, Any]) -> str:
        """Store `state` (what is new of it) and return its hash; one durable append, the state's own record last,
        so a torn write never leaves a state whose pieces are missing."""
        key = canonical_hash(state)
        objects = self._read(repair=True)
        if key in objects:
            return key
        new: dict[str, Any] = {}

        def keep(value: Any) -> str:
            digest = canonical_hash(value)
            if digest not in objects:
                new.setdefault(digest, value)
            return digest

        def pack(value: Any) -> Any:
            if isinstance(value, dict):
                if CHUNKS in value:
                    raise ValueError(f"a memory state may not use the key {CHUNKS!r}, which snapshots reserve")
                return {k: pack(v) for k, v in value.items()}
            if isinstance(value, (list, tuple)) and any(isinstance(v, (str, dict, list, tuple)) for v in value):
                refs = [keep(pack(v)) for v in value]
                return {CHUNKS: [keep(refs[i : i + CHUNK]) for i in range(0, len(refs), CHUNK)]}
            return value

        new[key] = pack(state)
        lines = [{"hash": h, "value": v} for h, v in new.items()]
        append_durable(self.path, lines)
        objects.update((r["hash"], r["value"]) for r in json.loads(json.dumps(lines)))  # as a reader will see them
        return key

    def get(self, key: str) -> dict[str, Any]:
        objects = self._read(repair=False)
        expanded_size(objects, key, self.path)  # a DAG of bounded size and depth: unpacking it ends and fits

        def unpack(value: Any) -> Any:
            if isinstance(value, dict):
                if CHUNKS in value:
                    return [unpack(objects[ref]) for chunk in value[CHUNKS] for ref in objects[chunk]]
                return {k: unpack(v) for k, v in value.items()}
            return value

        return unpack(objects[key])

    def __contains__(self, key: str) -> bool:
        return key in self._read(repair=False)


TIMES = frozenset({"wall_s", "llm_s", "latency_s", "created"})
"""The wall-clock fields of records and memory states (durations, and a memory item's creation time): the only ones
two runs of the same work may disagree on — and the content hashes of states that hold them (`memory_hash`)."""


def without_times(value: Any) -> Any:
    """A record (or any JSON value) with its `TIMES` dropped at every depth: what two runs of the same work share."""
    if isinstance(value, dict):
        return {key: without_times(item) for key, item in value.items() if key not in TIMES}
    if isinstance(value, list):
        return [without_times(item) for item in value]
    return value
