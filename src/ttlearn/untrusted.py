"""Files anyone may have written, opened as safely as a CSV. Run directories get shared, downloaded and attached to
bug reports, so every file in one is hostile input: it is opened only when it is a regular file (never through a
symbolic link, never a FIFO or a device, so nothing hangs and nothing outside is read or written), a write goes
only to a file with one link, and a document or line is read with a bound on its size and nesting depth. Every
refusal is an `UntrustedFileError`, a `ValueError` whose one line names the file (and the line)."""

from __future__ import annotations

import errno
import json
import os
import re
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import numpy as np

MAX_LINE_BYTES = 64 << 20
"""The longest record line read (a trial task with every LLM call of its attempts is a few MB at most)."""
MAX_DOCUMENT_BYTES = 64 << 20
"""The largest whole-file JSON document read (configs, summaries, forks, old per-game snapshots)."""
MAX_INFLATED_BYTES = MAX_DOCUMENT_BYTES
"""The most a compressed record file (`units.jsonl.gz` or `.xz`, committed where large) may inflate to: an LLM run of a
few hundred tasks inflates to about 12 MB, and a 1 MB file could otherwise inflate to a gigabyte."""
MAX_DEPTH = 100
"""The deepest nesting of lists and objects accepted in a record (real records nest fewer than 20 levels)."""


_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
"""What a terminal acts on instead of showing: C0 controls but newline and tab (ESC starts every escape sequence:
OSC 52 writes the clipboard, OSC 8 hides a link, CSI 2J clears the screen), DEL, C1 controls (0x9B is CSI in one
byte), and the bidirectional overrides and isolates that reorder what is shown."""


def printable(text: str) -> str:
    """`text` with every control character written as its escape (`\\x1b`, `\\u202e`), so that printing what a file
    or a model said cannot act on the terminal. Idempotent: an escape holds no control character."""
    return _CONTROLS.sub(lambda m: repr(m[0])[1:-1], text)


class UntrustedFileError(ValueError):
    """A file refused or a limit reached; the message is one line naming the file."""


def open_descriptor(path: Path, flags: int) -> int:
    """A descriptor of `path` opened with `flags` (os.O_*) without following a final symbolic link and without
    waiting (O_NONBLOCK: a FIFO opened to read or write would block until the other end opens it), refused unless a
    regular file, and, to write, one with a single link."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # the last component is a symbolic link
            raise UntrustedFileError(f"{path} is a symbolic link; only a regular file is opened: refused") from None
        if exc.errno == errno.ENXIO:  # a FIFO with no reader, opened to write; or a socket
            raise UntrustedFileError(f"{path} is not a regular file (a FIFO, device or directory); refused") from None
        raise
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise UntrustedFileError(f"{path} is not a regular file (a FIFO, device or directory); refused")
    if flags & (os.O_WRONLY | os.O_RDWR) and info.st_nlink > 1:
        os.close(fd)
        raise UntrustedFileError(f"{path} has {info.st_nlink} hard links; refusing to write through it")
    return fd


STORE_SIDE_FILES = ("-wal", "-shm", "-journal")
"""The files SQLite opens by name beside a store: its write-ahead log, shared memory and rollback journal."""


def check_store_files(path: Path) -> None:
    """Refuse a run directory's SQLite store — or a WAL, shared-memory or journal file beside it — that is a link
    (symbolic or hard) or not a regular file: SQLite opens them by name and would write through a link into someone
    else's files. Missing ones are fine (SQLite creates them)."""
    for candidate in (Path(path), *(Path(f"{path}{suffix}") for suffix in STORE_SIDE_FILES)):
        try:
            info = os.lstat(candidate)
        except FileNotFoundError:
            continue
        if stat.S_ISLNK(info.st_mode):
            raise UntrustedFileError(f"{candidate} is a symbolic link; a run's memory store is a file of its own")
        if not stat.S_ISREG(info.st_mode):
            raise UntrustedFileError(f"{candidate} is not a regular file (a FIFO, device or directory); refused")
        if info.st_nlink > 1:
            raise UntrustedFileError(
                f"{candidate} has {info.st_nlink} hard links; a run's memory store is a file of its own: refused"
            )


def regular_directory(path: Path) -> None:
    """Refuse `path` unless it is a directory (not a link to one) holding regular files only (a trainer's
    checkpoint, read by libraries that open its files by name)."""
    path = Path(path)
    if path.is_symlink():
        raise UntrustedFileError(f"{path} is a symbolic link; a run directory holds only regular files")
    if not path.is_dir():
        raise UntrustedFileError(f"{path} is not a directory; refused")
    for entry in os.scandir(path):
        if entry.is_symlink():
            raise UntrustedFileError(f"{entry.path} is a symbolic link; a run directory holds only regular files")
        if not entry.is_file(follow_symlinks=False):
            raise UntrustedFileError(f"{entry.path} is not a regular file (a FIFO, device or directory); refused")


@contextmanager
def open_regular(path: Path, mode: str = "rb") -> Iterator[IO[Any]]:
    """`path` opened as a binary file: "rb" to read, "ab" to append (created when missing), "r+b" to cut."""
    flags = {"rb": os.O_RDONLY, "ab": os.O_WRONLY | os.O_APPEND | os.O_CREAT, "r+b": os.O_RDWR}[mode]
    with os.fdopen(open_descriptor(Path(path), flags), mode) as fh:
        yield fh


def write_new(path: Path, data: bytes) -> None:
    """Write `data` to a file created afresh at `path` (a stale file or link there is removed first), fsynced."""
    path = Path(path)
    if path.is_symlink() or path.exists():
        path.unlink()
    fd = open_descriptor(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def write_atomic(path: Path, text: str) -> None:
    """Replace `path` with `text` atomically (a temporary file beside it, then a rename, which replaces a link
    itself rather than what it points at)."""
    path = Path(path)
    tmp = path.with_suffix(path.suffix + ".tmp")
    write_new(tmp, text.encode("utf-8"))
    os.replace(tmp, path)


def nesting_depth(data: bytes) -> int:
    """How deep the lists and objects of a JSON text (UTF-8) nest; brackets inside strings do not count. Vectorised:
    a quote opens or closes a string unless an odd run of backslashes precedes it."""
    codes = np.frombuffer(data, dtype=np.uint8)
    if codes.size == 0:
        return 0
    index = np.arange(codes.size)
    last_plain = np.maximum.accumulate(np.where(codes != 0x5C, index, -1))  # the last byte that is not a backslash
    quotes = np.flatnonzero(codes == 0x22)
    escaped = (quotes - 1 - np.where(quotes > 0, last_plain[np.maximum(quotes - 1, 0)], -1)) % 2 == 1
    toggles = np.zeros(codes.size, dtype=np.int64)
    toggles[quotes[~escaped]] = 1
    outside = np.cumsum(toggles) % 2 == 0
    steps = np.zeros(codes.size, dtype=np.int64)
    steps[((codes == 0x5B) | (codes == 0x7B)) & outside] = 1
    steps[((codes == 0x5D) | (codes == 0x7D)) & outside] = -1
    return int(np.cumsum(steps).max(initial=0))


def loads(text: str | bytes, where: str) -> Any:
    """`json.loads`, refusing nesting deeper than MAX_DEPTH (`where` names the file and line in the error)."""
    data = text.encode("utf-8", errors="replace") if isinstance(text, str) else text
    if data.count(b"[") + data.count(b"{") > MAX_DEPTH and nesting_depth(data) > MAX_DEPTH:
        raise UntrustedFileError(f"{where}: JSON nested deeper than {MAX_DEPTH} levels; refused")
    return json.loads(data)


def read_bytes(path: Path, limit: int = MAX_DOCUMENT_BYTES) -> bytes:
    """The contents of the regular file `path`, of at most `limit` bytes."""
    with open_regular(path) as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise UntrustedFileError(f"{path} is larger than {limit >> 20} MiB; refused")
    return data


def read_text(path: Path, limit: int = MAX_DOCUMENT_BYTES) -> str:
    """The UTF-8 text in the regular file `path`, of at most `limit` bytes."""
    try:
        return read_bytes(path, limit).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UntrustedFileError(f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start}); refused") from None


def read_json(path: Path, limit: int = MAX_DOCUMENT_BYTES) -> Any:
    """The JSON document in the regular file `path`, of at most `limit` bytes."""
    data = read_bytes(path, limit)
    try:
        return loads(data, str(path))
    except json.JSONDecodeError as exc:
        raise UntrustedFileError(f"{path} is not valid JSON ({exc}); refused") from None


def lines(fh: IO[bytes], path: Path) -> Iterator[bytes]:
    """The lines of an open file, each at most MAX_LINE_BYTES (a longer one is an error naming its number)."""
    number = 0
    while True:
        line = fh.readline(MAX_LINE_BYTES + 1)
        if not line:
            return
        number += 1
        if len(line) > MAX_LINE_BYTES:
            raise UntrustedFileError(f"{path}:{number}: a line longer than {MAX_LINE_BYTES >> 20} MiB; refused")
        yield line
