"""A run directory is untrusted input (docs/run-directory.md): every command that reads one — show, replay,
resume, memory diff / fork / inspect / explain, results, report, the arena — runs none of its code, writes nothing
outside it, and ends within seconds in a correct result or one error line, whatever the directory holds.

Each crafted directory starts as a copy of a real run (`run rps --llm scripted:random --memory history --games 2`),
or of an old session or trial run (tests/data/legacy, still read), with one edit, and always names a plug-in that
would leave a marker file if it were ever imported. The commands run
in a fresh process per directory (so no import from an earlier case hides one), each under an alarm (LIMIT_S)."""

from __future__ import annotations

import gzip
import hashlib
import json
import lzma
import os
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ttlearn.cli import app
from ttlearn.runs.durable import CHUNKS

ROOT = Path(__file__).resolve().parents[2]
LEGACY = ROOT / "tests" / "data" / "legacy"
FILES = {"run.json": "units.jsonl", "config.json": "events.jsonl", "trials.json": "tasks.jsonl"}
"""Config file → record file, of today's layout and the two layouts before one config existed."""
runner = CliRunner()
LIMIT_S = 30
"""Per command: a hang or a gigabyte expansion runs into it; `report` of a valid arena (matplotlib, bootstrap) takes
about 3 s on an idle machine and several times that on the shared, loaded one."""


def invoke(*args: str, cwd: Path | None = None):
    old = os.getcwd()
    try:
        if cwd:
            os.chdir(cwd)
        return runner.invoke(app, list(args), env={"COLUMNS": "10000"})
    finally:
        os.chdir(old)


@pytest.fixture(scope="module")
def real_run(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("real") / "run"
    result = invoke(
        "run",
        "rps",
        "--llm",
        "scripted:random",
        "--memory",
        "history",
        "--games",
        "2",
        "--rounds",
        "4",
        "--out",
        str(path),
    )
    assert result.exit_code == 0, result.output
    return path


EVIL = "from pathlib import Path\nPath({marker!r}).write_text('imported')\n"


def crafted(source: Path, where: Path, marker: Path, plugins: list[str] | None = None) -> Path:
    """A copy of the run at `source` whose config names a plug-in that writes `marker` when imported."""
    run = where / "run"
    shutil.copytree(source, run)
    (where / "dl" / "evilrun").mkdir(parents=True)
    (where / "dl" / "evilrun" / "notes.py").write_text(EVIL.format(marker=str(marker)))
    (run / "runhelpers.py").write_text(EVIL.format(marker=str(marker)))
    edit_config(run, plugins=plugins or [str(where / "dl" / "evilrun" / "notes.py"), "runhelpers"])
    return run


def config_file(run: Path) -> Path:
    return next(run / name for name in FILES if (run / name).is_file())


def records_file(run: Path) -> Path:
    return run / FILES[config_file(run).name]


def edit_config(run: Path, **fields) -> None:
    config = json.loads(config_file(run).read_text())
    config.update(fields)
    config_file(run).write_text(json.dumps(config))


# ---- the bounds, hand-computed ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text, depth",
    [
        ("", 0),
        ("1", 0),
        ("[]", 1),
        ("[[1,[2]]]", 3),
        ('"[[["', 0),
        ('["\\\\"]', 1),
        ('["\\"[["]', 1),
        ('{"a": "\\\\\\"[", "b": [[]]}', 3),
        ('["\\\\\\\\", [[]]]', 3),
        ("[" * 300 + "]" * 300, 300),
    ],
)
def test_nesting_depth_skips_brackets_in_strings(text, depth):
    from ttlearn.untrusted import nesting_depth

    assert nesting_depth(text.encode()) == depth
    if text:
        json.loads(text)  # each is valid JSON


def test_lines_past_the_limit_and_snapshot_expansions_are_refused(tmp_path, monkeypatch):
    from ttlearn import untrusted
    from ttlearn.runs.durable import MAX_EXPANDED, expanded_size

    monkeypatch.setattr(untrusted, "MAX_LINE_BYTES", 10)
    (tmp_path / "f").write_bytes(b"123456789\n" + b"x" * 11 + b"\n")
    with open(tmp_path / "f", "rb") as fh, pytest.raises(untrusted.UntrustedFileError, match=r"f:2: a line longer"):
        list(untrusted.lines(fh, tmp_path / "f"))
    from ttlearn.runs.durable import ELEMENT_WEIGHT

    # a state {"memory": ["ab", "ab"]}: the state (64) and its key (6), the chunked list (64), two strings (64 + 2)
    objects = {"k": {"memory": {CHUNKS: ["c"]}}, "c": ["s", "s"], "s": "ab"}
    assert ELEMENT_WEIGHT == 64 and expanded_size(objects, "k", tmp_path) == 64 + 6 + 64 + 2 * (64 + 2) == 266
    bomb = {"s": "x" * 100}  # a list of 64 chunks of 64 references to the level below, three levels: 64^6 strings
    for level, below in enumerate(["s", "l0", "l1"]):
        bomb[f"c{level}"], bomb[f"l{level}"] = [below] * 64, {CHUNKS: [f"c{level}"] * 64}
    assert expanded_size(bomb, "l0", tmp_path) == 64 + 64 * 64 * (64 + 100)  # one level: 671,808
    with pytest.raises(ValueError, match=f"more than {MAX_EXPANDED:,}"):
        expanded_size(bomb, "l2", tmp_path)
    with pytest.raises(ValueError, match="cycle"):
        expanded_size({"k": {CHUNKS: ["c"]}, "c": ["k"]}, "k", tmp_path)


# ---- item 1: reading a run directory runs none of its code --------------------------------------------------------
@pytest.mark.parametrize(
    "command",
    [
        ["show", "{run}"],
        ["show", "."],
        ["memory", "diff", "{run}", "--from", "1", "--to", "2"],
        ["memory", "fork", "{run}", "--unit", "1", "--out", "{out}/fork"],
        ["replay", "{run}", "--out", "{out}/replay"],
        ["resume", "{run}"],
    ],
    ids=lambda c: " ".join(c[:2]),
)
def test_a_recorded_plugin_is_never_imported(real_run, tmp_path, command):
    marker = tmp_path / "marker"
    run = crafted(real_run, tmp_path, marker)
    args = [part.format(run=run, out=tmp_path) for part in command]
    done = subprocess.run(  # a fresh process each: `cd DIR && ttlearn show .` once imported ./runhelpers.py
        [sys.executable, "-m", "ttlearn", *args],
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
        cwd=run,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert not marker.exists(), "a plug-in named by the run directory was imported"
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_recorded_plugin_that_is_needed_is_named_with_the_flag_that_loads_it(real_run, tmp_path):
    run = crafted(real_run, tmp_path, tmp_path / "marker", plugins=[str(tmp_path / "solo.py")])
    edit_config(run, env="solo", env_options={})
    (run / "units.jsonl").write_text("")
    result = invoke("resume", str(run))
    assert result.exit_code == 2 and f"--plugin {tmp_path / 'solo.py'}" in result.output, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert "TTLEARN_PLUGINS" in result.output and len(errors) == 1
    assert errors[0].startswith("error: unknown environment")


# ---- item 2: resume writes only regular files inside the run ------------------------------------------------------
def test_resume_never_writes_through_a_link(real_run, tmp_path):
    run = crafted(real_run, tmp_path, tmp_path / "marker")
    lines = (run / "units.jsonl").read_text().splitlines(keepends=True)
    assert [json.loads(x)["index"] for x in lines] == [1, 2]
    (run / "units.jsonl").write_text(lines[0])  # unit 2 is left to play
    outside = {name: tmp_path / f"victim-{name}" for name in ("units.jsonl", "snapshots.jsonl")}
    for name, victim in outside.items():
        victim.write_text(f"precious {name}\n")
        (run / name).unlink()
        (run / name).symlink_to(victim)
    result = invoke("resume", str(run))
    assert result.exit_code == 2 and "symbolic link" in result.output, result.output
    assert all(v.read_text() == f"precious {n}\n" for n, v in outside.items())


# ---- item 3: memory inspect writes nothing --------------------------------------------------------------------------
def test_memory_inspect_opens_a_named_store_read_only(real_run, tmp_path):
    run = crafted(real_run, tmp_path, tmp_path / "marker")
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE mine (x)")
    before = other.read_bytes()
    edit_config(run, memory_options={"store": str(other)})
    for command in ("inspect", "explain"):
        result = invoke("memory", command, str(run))
        assert result.exit_code == 2 and "not a ttlearn memory store" in result.output, result.output
    assert other.read_bytes() == before and not Path(f"{other}-wal").exists()


# ---- item 5: strings from files are literal text --------------------------------------------------------------------
def test_markup_in_a_config_or_a_memory_is_printed_literally(real_run, tmp_path):
    run = crafted(real_run, tmp_path, tmp_path / "marker")
    edit_config(run, player="scripted:random[/]", env_options={"rounds": 4, "x": "[link=https://evil.example]y"})
    result = invoke("show", str(run))
    assert result.exit_code == 0 and "scripted:random[/]" in result.output, result.output
    from ttlearn.memory.embed import make_embedder
    from ttlearn.memory.items import NewItem
    from ttlearn.memory.store import MemoryStore

    store = tmp_path / "m.sqlite"
    with MemoryStore(store) as memory:
        namespace = memory.namespace("default", make_embedder("hash"))
        namespace.add(NewItem("[/] intent [bold]x", "[link=https://evil.example]experience[/link]", 0.0, "r", 1))
    edit_config(run, memory_options={"store": str(store)})
    result = invoke("memory", "inspect", str(run))
    assert result.exit_code == 0 and "[/] intent [bold]x" in result.output and "[link=https" in result.output


# ---- issue 41, items 1 and 9: a store reached through the run directory ------------------------------------------
@pytest.fixture(scope="module")
def memrl_run(tmp_path_factory) -> Path:
    """A real MemRL run of two games; its memories in the run's own store, memrl.sqlite."""
    path = tmp_path_factory.mktemp("memrl") / "run"
    done = subprocess.run(  # its own process: the store is closed (no -wal, no -shm left) when it ends
        [sys.executable, "-m", "ttlearn", "run", "rps", "--llm", "scripted:random", "--memory", "memrl", "-m",
         "write=trajectory", "-m", "embedder=hash", "--games", "2", "--rounds", "4", "--out", str(path)],
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")}, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0 and (path / "memrl.sqlite").is_file(), done.stdout + done.stderr
    assert not Path(f"{path / 'memrl.sqlite'}-wal").exists()
    return path


def victim_store(where: Path) -> Path:
    """Someone else's store, with a namespace "default" of its own (closed: in WAL mode, without side files)."""
    from ttlearn.memory.embed import make_embedder
    from ttlearn.memory.items import NewItem
    from ttlearn.memory.store import MemoryStore

    store = where / "victim" / "store.sqlite"
    store.parent.mkdir()
    with MemoryStore(store) as memory:
        memory.namespace("default", make_embedder("hash")).add(NewItem("their intent", "their experience", 0.5, "v", 1))
    assert not Path(f"{store}-wal").exists() and not Path(f"{store}-shm").exists()
    return store


def folder_state(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


@pytest.mark.parametrize("link", ["symbolic link", "hard link", "hard-linked -wal", "symbolic -shm"])
def test_resume_never_writes_another_store_through_the_run_directory(memrl_run, tmp_path, link):
    """The run's memrl.sqlite as a link to someone else's store (with that store's namespace): `resume` ran to the end
    and the victim's namespace held only the attacker's items; a hard-linked -wal grew a 20-byte victim file. Each
    is now one line before anything is written."""
    run = crafted(memrl_run, tmp_path, tmp_path / "marker")
    (run / "units.jsonl").write_text((run / "units.jsonl").read_text().splitlines(keepends=True)[0])  # 1 unit to play
    victim = victim_store(tmp_path)
    own = run / "memrl.sqlite"
    if link in ("symbolic link", "hard link"):
        own.unlink()
        own.symlink_to(victim) if link == "symbolic link" else os.link(victim, own)
    else:
        side = Path(f"{victim}.side")
        side.write_bytes(b"twenty bytes of data")
        target = run / ("memrl.sqlite-wal" if "-wal" in link else "memrl.sqlite-shm")
        os.link(side, target) if "hard" in link else target.symlink_to(side)
    before = folder_state(victim.parent)
    result = invoke("resume", str(run))
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert result.exit_code == 2 and len(errors) == 1 and "memrl.sqlite" in errors[0], result.output
    assert folder_state(victim.parent) == before, "someone else's store (or a file beside it) changed"


def test_read_only_commands_create_nothing_beside_a_store(memrl_run, tmp_path):
    """`memory inspect` of a config naming an outside store in WAL mode created its -wal and -shm files; a hard-linked
    memrl.sqlite-shm in the run directory was overwritten. A store is now read as an immutable file, or from a
    private copy where its WAL holds what the file does not yet."""
    run = crafted(memrl_run, tmp_path, tmp_path / "marker")
    victim = victim_store(tmp_path)
    edit_config(run, memory_options={**json.loads((run / "run.json").read_text())["memory_options"],
                                      "store": str(victim)})  # fmt: skip
    before = folder_state(victim.parent)
    for command in ("inspect", "explain"):
        result = invoke("memory", command, str(run))
        assert result.exit_code == 0, result.output
    assert "their experience" in invoke("memory", "inspect", str(run)).output
    assert folder_state(victim.parent) == before, "a read-only command wrote beside the store"

    edit_config(run, memory_options=json.loads((memrl_run / "run.json").read_text())["memory_options"])
    side = tmp_path / "victim" / "shm-victim"
    side.write_bytes(b"twenty bytes of data")
    os.link(side, run / "memrl.sqlite-shm")
    result = invoke("memory", "inspect", str(run))
    assert result.exit_code == 0 and side.read_bytes() == b"twenty bytes of data", result.output


def test_a_live_store_is_read_whole_from_a_private_copy(memrl_run, tmp_path):
    """While a writer holds it open, a store's newest items are only in its WAL: read-only commands still see them."""
    from ttlearn.memory.embed import make_embedder
    from ttlearn.memory.items import NewItem
    from ttlearn.memory.store import MemoryStore

    run = crafted(memrl_run, tmp_path, tmp_path / "marker")
    with MemoryStore(run / "memrl.sqlite") as writer:
        namespace = writer.namespace("default", make_embedder("hash"))
        namespace.add(NewItem("fresh intent", "only in the WAL", 0.0, "w", 1))
        wal = Path(f"{run / 'memrl.sqlite'}-wal")
        assert wal.stat().st_size > 0
        before = folder_state(run)
        result = invoke("memory", "inspect", str(run))
        assert result.exit_code == 0 and "only in the WAL" in result.output, result.output
        assert folder_state(run) == before


# ---- issue 41, item 6: the limit on a snapshot's expansion counts the work -----------------------------------------
def nested_bomb(run: Path, leaf: object, width: int, repeats: int) -> int:
    """Point the last unit at a state {"memory": [...]} whose list is `repeats` copies of a list of `width` × 64 × 64
    copies of `leaf`, stored in a few KB (chunks of chunks); returns the number of leaves."""
    ref = lambda name: name.ljust(64, "0")  # noqa: E731
    records = [{"hash": ref("leaf"), "value": leaf}, {"hash": ref("k0"), "value": [ref("leaf")] * 64},
               {"hash": ref("l1"), "value": {CHUNKS: [ref("k0")] * 64}},  # 4,096 leaves
               {"hash": ref("k1"), "value": [ref("l1")] * width},
               {"hash": ref("l2"), "value": {CHUNKS: [ref("k1")] * 64}},  # width × 64 × 4,096 leaves
               {"hash": ref("k2"), "value": [ref("l2")] * repeats}]  # fmt: skip
    records.append({"hash": last_hash(run), "value": {"memory": {CHUNKS: [ref("k2")]}}})
    append(run / "snapshots.jsonl", records)
    return repeats * width * 64 * 4096


PEAK = """
import atexit, re, runpy, sys
peak = lambda: re.search(r"VmHWM:\\s+(\\d+)", open("/proc/self/status").read())[1]  # this process's, not its parent's
atexit.register(lambda: sys.stderr.write(f"\\npeak-rss-kb {peak()}\\n"))
sys.argv = ["ttlearn", *sys.argv[1:]]
runpy.run_module("ttlearn", run_name="__main__")
"""


def run_command(args: list[str], cwd: Path, timeout: float = LIMIT_S) -> tuple[subprocess.CompletedProcess, float, int]:
    """`ttlearn ARGS` in a fresh process: (its result, wall seconds, its peak RSS in MB), under `timeout`. The peak is
    VmHWM: getrusage's maxrss keeps the parent's (pytest's) from before the exec."""
    import time

    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", PEAK, *args], env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
                          cwd=cwd, capture_output=True, text=True, timeout=timeout)  # fmt: skip
    peak = re.findall(r"peak-rss-kb (\d+)", done.stderr)
    return done, time.perf_counter() - start, int(peak[-1]) // 1024 if peak else -1


def test_a_small_snapshot_that_expands_to_84_million_elements_is_refused_at_once(real_run, tmp_path):
    """16 KB of chunks that expand to 84 M integers, under the old limit of 10⁸ elements plus characters: `memory
    fork` ran for minutes and took gigabytes. The limit now weighs each element as 64 characters."""
    run = crafted(real_run, tmp_path, tmp_path / "marker")
    assert nested_bomb(run, 0, 20, 16) == 83_886_080 and (run / "snapshots.jsonl").stat().st_size < 40_000
    for args in (["memory", "fork", str(run), "--unit", "2", "--out", str(tmp_path / "fork")],
                 ["memory", "diff", str(run), "--from", "1", "--to", "2"]):  # fmt: skip
        done, seconds, _ = run_command(args, tmp_path)
        assert done.returncode == 2 and "expands to more than" in done.stdout, done.stdout + done.stderr
        assert seconds < 10, seconds


def test_the_largest_snapshot_under_the_limit_is_read_in_seconds(real_run, tmp_path):
    """The worst a crafted state can be under the limit — 786 k tiny elements, or 42 M characters of shared text in
    262 k strings — forks and diffs in seconds and well under a gigabyte."""
    from ttlearn.runs.durable import ELEMENT_WEIGHT, MAX_EXPANDED

    for leaf, width, repeats in ((0, 3, 1), ("x" * 160, 1, 1)):
        run = crafted(real_run, tmp_path / f"{width}", tmp_path / "marker")
        leaves = nested_bomb(run, leaf, width, repeats)
        weight = leaves * (ELEMENT_WEIGHT + (len(leaf) if isinstance(leaf, str) else 0))
        assert 0.5 * MAX_EXPANDED < weight < MAX_EXPANDED
        for args in (["memory", "fork", str(run), "--unit", "2", "--out", str(tmp_path / f"{width}" / "fork")],
                     ["memory", "diff", str(run), "--from", "1", "--to", "2"]):  # fmt: skip
            done, seconds, peak_mb = run_command(args, tmp_path)
            assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
            assert seconds < LIMIT_S and peak_mb < 1500, (args[1], seconds, peak_mb)


# ---- issue 48, item 4: the weight of n references to n pieces is counted before anything is built -----------------
def square_bomb(run: Path, n: int) -> None:
    """Point the last unit at a state whose list is n references to one list of n references to one leaf: three lines
    (2.7 MB at n = 20,000) that expand to n² elements."""
    leaf, pieces = "1".ljust(64, "0"), "2".ljust(64, "0")
    append(
        run / "snapshots.jsonl",
        [
            {"hash": leaf, "value": "x"},
            {"hash": pieces, "value": [leaf] * n},
            {"hash": last_hash(run), "value": {"memory": {CHUNKS: [pieces] * n}}},
        ],
    )


def test_n_references_to_n_pieces_are_refused_at_once(real_run, tmp_path):
    """n = 20,000: `memory fork` built the 4·10⁸-element list before weighing it and died with MemoryError after
    79 s; at n = 12,000 `memory diff` refused after 31 s and 1.18 GB. The weight now comes from the counts."""
    run = crafted(real_run, tmp_path, tmp_path / "marker")
    square_bomb(run, 20_000)
    for args in (["memory", "fork", str(run), "--unit", "2", "--out", str(tmp_path / "fork")],
                 ["memory", "diff", str(run), "--from", "1", "--to", "2"]):  # fmt: skip
        done, seconds, peak_mb = run_command(args, tmp_path)
        assert done.returncode == 2 and "expands to more than" in done.stdout, done.stdout + done.stderr
        assert seconds < 10 and peak_mb < 400, (args[1], seconds, peak_mb)


# ---- issue 41, item 7: `results` reads committed records under the file rules -------------------------------------
def inflating_gzip(path: Path, inflated: int) -> None:
    """A gzip file of `inflated` spaces: about a thousandth of that on disk."""
    import zlib

    packer, block = zlib.compressobj(9, zlib.DEFLATED, 31), b" " * (1 << 20)
    with open(path, "wb") as fh:
        for _ in range(inflated >> 20):
            fh.write(packer.compress(block))
        fh.write(packer.flush())


@pytest.mark.parametrize(
    "case", ["/dev/zero", "a FIFO", "a link outside", "a 1 MB gzip of 1 GiB", "an xz of 128 MiB", "a deep line"]
)
def test_results_reads_committed_records_under_the_file_rules(real_run, tmp_path, case):
    """`ttlearn results` of a row comparing two runs' records (kind `scores`): units.jsonl as a link to /dev/zero read
    2.7 GB, a FIFO hung, a 1 MB units.jsonl.gz inflated to gigabytes. Each is now one error line at once."""
    root = tmp_path / "results"
    for name in ("a", "b"):
        shutil.copytree(real_run, root / name)
    (root / "table.json").write_text(json.dumps({"rows": [
        {"experiment": "x", "comparison": "y", "kind": "scores", "result": "a", "against": "b"}]}))  # fmt: skip
    records = root / "a" / "units.jsonl"
    (tmp_path / "victim.jsonl").write_text(records.read_text())
    records.unlink()
    if case == "/dev/zero":
        records.symlink_to("/dev/zero")
    elif case == "a FIFO":
        os.mkfifo(records)
    elif case == "a link outside":
        records.symlink_to(tmp_path / "victim.jsonl")
    elif case == "a deep line":
        with gzip.open(f"{records}.gz", "wt") as fh:
            fh.write('{"x": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    elif case == "an xz of 128 MiB":  # twice what a compressed records file may inflate to
        Path(f"{records}.xz").write_bytes(lzma.compress(b" " * (128 << 20), preset=0))
    else:
        inflating_gzip(Path(f"{records}.gz"), 1 << 30)
        assert Path(f"{records}.gz").stat().st_size < 1_200_000
    done, seconds, peak_mb = run_command(["results", "--root", str(root)], tmp_path)
    errors = [line for line in done.stdout.splitlines() if line.startswith("error:")]
    assert done.returncode == 2 and len(errors) == 1 and "Traceback" not in done.stdout + done.stderr, done.stdout
    assert seconds < 10 and peak_mb < 500, (seconds, peak_mb)


# ---- issue 48, item 9: `results --write FILE` reads and writes FILE under the same rules --------------------------
@pytest.mark.parametrize("case", ["/dev/zero", "a FIFO", "a link to another file"])
def test_results_write_opens_its_file_under_the_file_rules(tmp_path, case):
    """`results --write README.md` where README.md linked to /dev/zero ended in MemoryError, a FIFO hung, and a link to
    another file rewrote that file. Each is now one error line at once, and nothing outside changes."""
    root = tmp_path / "results"
    root.mkdir()
    (root / "table.json").write_text(json.dumps({"rows": []}))
    victim = tmp_path / "victim.md"
    victim.write_text("<!-- results table: rebuilt from results/ by `ttlearn results --write docs/results.md` -->\n"
                      "precious\n<!-- end of results table -->\n")  # fmt: skip
    readme = tmp_path / "README.md"
    if case == "/dev/zero":
        readme.symlink_to("/dev/zero")
    elif case == "a FIFO":
        os.mkfifo(readme)
    else:
        readme.symlink_to(victim)
    before = victim.read_text()
    done, seconds, peak_mb = run_command(["results", "--root", str(root), "--write", str(readme)], tmp_path)
    errors = [line for line in done.stdout.splitlines() if line.startswith("error:")]
    assert done.returncode == 2 and len(errors) == 1 and "Traceback" not in done.stdout + done.stderr, done.stdout
    assert seconds < 10 and peak_mb < 500, (seconds, peak_mb)
    assert victim.read_text() == before


def test_results_write_replaces_a_regular_file(tmp_path):
    """A regular README with the markers is rewritten; another name (a hard link) of it keeps the old text."""
    root = tmp_path / "results"
    root.mkdir()
    (root / "table.json").write_text(json.dumps({"rows": []}))
    readme = tmp_path / "README.md"
    readme.write_text("head\n<!-- results table: rebuilt from results/ by `ttlearn results --write docs/results.md` -->"
                      "\nold\n<!-- end of results table -->\ntail\n")  # fmt: skip
    os.link(readme, tmp_path / "other-name.md")
    result = invoke("results", "--root", str(root), "--write", str(readme))
    assert result.exit_code == 0, result.output
    assert "old" not in readme.read_text() and readme.read_text().startswith("head\n")
    assert "old" in (tmp_path / "other-name.md").read_text()


def test_memory_export_never_writes_through_a_link_beside_its_output(tmp_path):
    """`memory export --out dump.json` wrote a temporary file beside it with `write_text`, which followed a link
    planted there into any file; it now writes as every file is written (`untrusted.write_atomic`)."""
    from ttlearn.memory.store import MemoryStore

    MemoryStore(tmp_path / "m.sqlite").close()
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    for name in (".dump.json.partial", "dump.json.tmp"):  # the temporary names, then and now
        (tmp_path / name).symlink_to(victim)
    result = invoke("memory", "export", str(tmp_path / "m.sqlite"), "--out", str(tmp_path / "dump.json"))
    assert result.exit_code == 0, result.output
    assert victim.read_text() == "precious\n" and json.loads((tmp_path / "dump.json").read_text())["namespaces"] == []


# ---- issue 41, item 8: terminal escape sequences are printed escaped ----------------------------------------------
OSC52 = "\x1b]52;c;ZWNobyBwd25lZA==\x07"  # writes the clipboard
OSC8 = "\x1b]8;;https://evil.example\x1b\\click\x1b]8;;\x1b\\"  # a link whose target is hidden
CSI = "\x1b[2J\x9b31m"  # clears the screen; the same introducer as one C1 byte
RAW_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
"""What a terminal may act on: C0 controls but newline and tab, DEL, C1 controls."""


def test_escape_sequences_from_a_run_or_a_store_reach_the_terminal_escaped(real_run, tmp_path):
    run = crafted(real_run, tmp_path, tmp_path / "marker")
    edit_config(run, player=f"scripted:random{OSC52}", env_options={"rounds": 4, "x": OSC8})
    lines = (run / "units.jsonl").read_text().splitlines()
    unit = json.loads(lines[0])
    unit["attempts"][0]["steps"][0]["action"] = f"rock{CSI}"
    (run / "units.jsonl").write_text("\n".join([json.dumps(unit), *lines[1:]]) + "\n")
    from ttlearn.memory.embed import make_embedder
    from ttlearn.memory.items import NewItem
    from ttlearn.memory.store import MemoryStore

    store = tmp_path / "m.sqlite"
    with MemoryStore(store) as memory:
        namespace = memory.namespace("default", make_embedder("hash"))
        namespace.add(NewItem(f"intent {OSC52}", f"experience {OSC8} {CSI}", 0.0, "run", 1, unit=1))
        log = namespace.log_retrieval(f"query {CSI}", [], [], explored=False, run_id="run")
        namespace.assign_episode([log], 1, 1)
    edit_config(run, memory_options={"store": str(store)})
    for args, shown in (
        (["show", str(run)], "scripted:random\\x1b]52;c;ZWNobyBwd25lZA==\\x07"),
        (["show", str(run), "--unit", "1", "--prompts"], "rock\\x1b[2J\\x9b31m"),
        (["memory", "inspect", str(run)], "\\x1b]8;;https://evil.example\\x1b\\click"),
        (["memory", "explain", str(run), "--unit", "1"], "query \\x1b[2J\\x9b31m"),
    ):
        result = invoke(*args)
        assert result.exit_code == 0 and shown in result.output, (args, result.output)
        assert not RAW_CONTROL.search(result.output), (args, result.output)


# ---- the corpus: every crafted directory through every command that reads one --------------------------------------
def chunk_cycle(run: Path) -> None:
    key = last_hash(run)
    a, b = "a" * 64, "b" * 64
    append(
        run / "snapshots.jsonl",
        [
            {"hash": a, "value": [b]},
            {"hash": b, "value": {CHUNKS: [a]}},
            {"hash": key, "value": {"memory": {CHUNKS: [a]}}},
        ],
    )


def chunk_bomb(run: Path) -> None:
    """A 64 × 64 chunk tree three levels deep: a few hundred KB that expand to 64^6 strings."""
    records, ref = [{"hash": "s" * 64, "value": "x" * 100}], "s" * 64
    for level in range(3):
        refs = [ref] * 64
        chunk = f"c{level}".ljust(64, "0")
        records.append({"hash": chunk, "value": refs})
        ref = f"l{level}".ljust(64, "0")
        records.append({"hash": ref, "value": {CHUNKS: [chunk] * 64}})
    records.append({"hash": "t".ljust(64, "0"), "value": [ref]})
    records.append({"hash": last_hash(run), "value": {"memory": {CHUNKS: ["t".ljust(64, "0")]}}})
    append(run / "snapshots.jsonl", records)


def deep_line(run: Path) -> None:
    count = next(k for k in ("units", "games", "tasks") if k in json.loads(config_file(run).read_text()))
    with open(records_file(run), "a") as fh:
        fh.write('{"index": 4, "type": "game", "game": 4, "x": ' + "[" * 200_000 + "]" * 200_000 + "}\n")
    edit_config(run, **{count: 4})


def deep_config(run: Path) -> None:
    config = json.loads(config_file(run).read_text())
    config_file(run).write_text(json.dumps(config)[:-1] + ', "deep": ' + "[" * 100_000 + "]" * 100_000 + "}")


def link_to(target: str, which: str = "records"):
    """Replace the run's records (or config, or another file by name) by a link to `target`."""

    def edit(run: Path) -> None:
        path = {"records": records_file, "config": config_file}.get(which, lambda r: r / which)(run)
        path.unlink()
        path.symlink_to(target)

    return edit


def fifo(run: Path) -> None:
    records_file(run).unlink()
    os.mkfifo(records_file(run))


def fifo_lock(run: Path) -> None:
    (run / ".lock").unlink(missing_ok=True)
    os.mkfifo(run / ".lock")


def malformed(run: Path) -> None:
    """The last record's attempts (an old game's episode) not a list but a number."""
    path = records_file(run)
    lines = path.read_text().splitlines()
    unit = json.loads(lines[-1])
    unit.update(attempts=5, episode=5)
    path.write_text("\n".join([*lines[:-1], json.dumps(unit)]) + "\n")


def last_hash(run: Path) -> str:
    """Point the last unit at a new snapshot hash (returned) that the edit then stores."""
    path = records_file(run)
    lines = path.read_text().splitlines()
    unit = json.loads(lines[-1])
    unit["memory_hash"] = "f" * 64
    path.write_text("\n".join([*lines[:-1], json.dumps(unit)]) + "\n")
    return "f" * 64


def append(path: Path, records: list[dict]) -> None:
    with open(path, "a") as fh:
        fh.write("".join(json.dumps(r) + "\n" for r in records))


def store_linked(kind: str):
    """The run's own store (memory memrl, no store= option) linked to a SQLite file outside: itself by a symbolic or
    a hard link, or its -shm by a hard link."""

    def edit(run: Path) -> None:
        other = run.parent / "outside" / "victim.sqlite"
        with sqlite3.connect(other) as conn:
            conn.execute("CREATE TABLE mine (x)")
        edit_config(run, memory="memrl", memory_options={"embedder": "hash"})
        if kind == "symbolic":
            (run / "memrl.sqlite").symlink_to(other)
        elif kind == "hard":
            os.link(other, run / "memrl.sqlite")
        else:  # a real store of the run in WAL mode: SQLite opens its -shm, here someone else's file
            from ttlearn.memory.store import MemoryStore

            MemoryStore(run / "memrl.sqlite").close()
            os.link(run.parent / "outside" / "victim.txt", run / "memrl.sqlite-shm")

    return edit


def terminal_escapes(run: Path) -> None:
    """A player name, an environment option and a recorded move that would act on the terminal."""
    edit_config(run, player=f"scripted:random{OSC52}", env_options={"rounds": 4, "x": OSC8})
    path = records_file(run)
    lines = path.read_text().splitlines()
    unit = json.loads(lines[0])
    unit["attempts"][0]["steps"][0]["action"] = f"rock{CSI}"
    path.write_text("\n".join([json.dumps(unit), *lines[1:]]) + "\n")


def other_store(run: Path) -> None:
    other = run.parent / "outside" / "victim.sqlite"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE mine (x)")
    edit_config(run, memory="memrl", memory_options={"store": str(other)})


CORPUS = {
    "plugins only": lambda run: None,
    "markup": lambda run: edit_config(run, player="scripted:random[/]", env_options={"x": "[link=https://e.x]y[/]"}),
    "chunk cycle": chunk_cycle,
    "chunk bomb": chunk_bomb,
    "deep line": deep_line,
    "deep config": deep_config,
    "records to /dev/zero": link_to("/dev/zero"),
    "records to outside": link_to("../outside/victim.txt"),
    "snapshots to outside": link_to("../outside/victim.txt", "snapshots.jsonl"),
    "config to outside": link_to("../outside/victim.json", "config"),
    "summary to outside": link_to("../outside/victim.json", "summary.json"),
    "records a FIFO": fifo,
    "malformed record": malformed,
    "store elsewhere": other_store,
    "store a symbolic link": store_linked("symbolic"),
    "store a hard link": store_linked("hard"),
    "store -shm a hard link": store_linked("shm"),
    "terminal escapes": terminal_escapes,
    "84 M integers": lambda run: nested_bomb(run, 0, 20, 16),
    "n references to n pieces": lambda run: square_bomb(run, 20_000),
    "lock a FIFO": fifo_lock,
}

COMMANDS = [
    ["show", "{run}"],
    ["show", "{run}", "--unit", "1", "--prompts"],
    ["replay", "{run}", "--out", "{out}/replay"],
    ["resume", "{run}"],
    ["memory", "diff", "{run}", "--from", "1", "--to", "2"],
    ["memory", "fork", "{run}", "--unit", "2", "--out", "{out}/fork"],
    ["memory", "inspect", "{run}"],
    ["memory", "explain", "{run}"],
    ["results", "--root", "{results}"],
    ["report", "{arena}"],
    [
        "arena",
        "--env",
        "rps",
        "--memories",
        "history",
        "--seeds",
        "1",
        "--games",
        "2",
        "--llm",
        "scripted:random",
        "--rounds",
        "4",
        "--out",
        "{arena}",
        "--workers",
        "1",
    ],
]

DRIVER = (
    """
import json, os, signal, sys, time, traceback
from typer.testing import CliRunner
from ttlearn.cli import app

def alarm(*_):
    raise TimeoutError("command ran too long")

signal.signal(signal.SIGALRM, alarm)
found = []
for args in json.loads(sys.argv[1]):
    start = time.perf_counter()
    signal.alarm(%d)
    try:
        result = CliRunner().invoke(app, args, env={"COLUMNS": "10000"})
        crash = None if result.exception is None or isinstance(result.exception, SystemExit) else repr(result.exception)
        code, output = result.exit_code, result.output
    except TimeoutError as exc:
        code, output, crash = None, "", repr(exc)
    finally:
        signal.alarm(0)
    found.append({"args": args, "code": code, "output": output, "crash": crash, "s": time.perf_counter() - start})
print(json.dumps(found))
"""
    % LIMIT_S
)


def tree_hashes(root: Path, skip: set[Path]) -> dict[str, str]:
    found = {}
    for path in sorted(root.rglob("*")):
        if any(path == s or s in path.parents for s in skip) or path.is_symlink() or not path.is_file():
            continue
        found[str(path.relative_to(root))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


OLD_CASES = (
    "plugins only",
    "records to /dev/zero",
    "config to outside",
    "records a FIFO",
    "malformed record",
    "deep line",
)
"""The edits also made to the two layouts before one config existed, which `runs.legacy` still reads."""
LAYOUTS = [("units", case) for case in CORPUS] + [(old, case) for old in ("session", "trials") for case in OLD_CASES]


@pytest.mark.parametrize("layout, case", LAYOUTS, ids=[f"{layout}: {case}" for layout, case in LAYOUTS])
def test_every_command_survives_a_crafted_run_directory(real_run, tmp_path, layout, case):
    marker = tmp_path / "marker"
    run = crafted(real_run if layout == "units" else LEGACY / layout, tmp_path, marker)
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "victim.txt").write_text("precious\n")
    (tmp_path / "outside" / "victim.json").write_text('{"precious": true}')
    CORPUS[case](run)
    results_root = tmp_path / "results"
    results_root.mkdir()
    (results_root / "table.json").write_text(
        json.dumps(
            {"rows": [{"experiment": "x", "comparison": "y", "kind": "scores", "result": "run", "against": "run"}]}
        )
    )
    (results_root / "run").symlink_to(run)  # a results folder naming the crafted run
    arena = tmp_path / "arena"
    (arena / "runs" / "history" / "default").mkdir(parents=True)
    (arena / "runs" / "history" / "default" / "seed0").symlink_to(run)
    outputs = tmp_path / "outputs"
    outputs.mkdir()
    before = tree_hashes(tmp_path, {run, outputs, arena})
    commands = [[part.format(run=run, out=outputs, results=results_root, arena=arena) for part in c] for c in COMMANDS]
    done = subprocess.run(
        [sys.executable, "-c", DRIVER, json.dumps(commands)],
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
        cwd=run,
        capture_output=True,
        text=True,
        timeout=LIMIT_S * len(COMMANDS) + 60,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert not marker.exists(), "a plug-in named by the run directory was imported"
    assert tree_hashes(tmp_path, {run, outputs, arena}) == before, "a file outside the run directory changed"
    for outcome in json.loads(done.stdout):
        command = " ".join(outcome["args"][:2])
        assert outcome["crash"] is None, f"{case} / {command}: {outcome['crash']}\n{outcome['output'][-2000:]}"
        assert not RAW_CONTROL.search(outcome["output"]), f"{case} / {command}: {outcome['output'][-2000:]!r}"
        assert outcome["s"] < LIMIT_S, f"{case} / {command} took {outcome['s']:.1f}s"
        if outcome["code"] != 0:
            errors = [line for line in outcome["output"].splitlines() if line.startswith("error:")]
            assert outcome["code"] in (1, 2) and len(errors) == 1, f"{case} / {command}: {outcome['output'][-2000:]}"
            assert "Traceback" not in outcome["output"]
