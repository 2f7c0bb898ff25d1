"""Run untrusted Python (model-written code) in a child process: its failure, loop or mischief costs only itself.

What a sandboxed program gets, on Linux:
- its own fresh temporary directory as working directory, HOME and TMPDIR, deleted afterwards; a minimal environment
  (no variables of ours); the standard library only (`python -I -S -u`: no site-packages, which also starts it in ~10 ms
  instead of ~60 ms); stdin closed;
- resource limits, set by its first statements before any of its code runs: CPU seconds, address space, file size,
  open files, processes, no core dumps;
- a wall-time limit; when it ends or times out, its whole process group (it runs in a new session) is killed;
- output capped: stdout and stderr together, plus the private report stream on file descriptor 3, each read up to a
  byte budget and the rest discarded.

What stops it from harming anything outside its directory (each part measured by `tests/test_sandbox.py`):
- **As root**, it runs under a fresh unprivileged uid and gid (random, above 10^9, no supplementary groups) that owns
  only the sandbox directory: file permissions then protect every other file, it cannot signal our processes, and
  `RLIMIT_NPROC` binds (it does not bind root), so a fork bomb stops at `max_processes`. After the run, any process
  still running under that uid (one that left the process group with `setsid`) is killed. That uid must be able to
  run the interpreter: `sys.executable` if a probe run as such a uid succeeds, else the system `python3` (a pyenv
  Python under a private /root fails the probe); with neither, `run_python` refuses with a clear error.
- **As an ordinary user** it runs as you. `RLIMIT_NPROC` then counts all your processes, so it usually cannot start
  any at all.
- **Landlock** (Linux ≥ 5.13; applied when the kernel has it, root or not): it may write, create and delete only
  inside its directory (reading stays allowed everywhere); from ABI 4 (Linux 6.7) it cannot open or accept TCP
  connections, from ABI 6 (Linux 6.12) it cannot signal processes outside its sandbox.
Without root and without Landlock, nothing but convention (its cwd and HOME) keeps it away from your files: `isolation`
says which case applies. It can always read what all users may read, use the CPU and memory its limits allow, and
forge its own report stream (a verdict channel, not a security boundary).
"""

from __future__ import annotations

import ctypes
import math
import os
import secrets
import selectors
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from functools import cache
from pathlib import Path

REPORT_FD = 3
"""The file descriptor the program may write structured results to, apart from whatever the code under test prints."""

SANDBOX_UIDS = range(1_000_000_000, 2_000_000_000)
"""Where a root parent draws each run's fresh uid (and gid) from: above any real account's."""
_SYSTEM_PYTHONS = ("/usr/bin/python3", "/usr/local/bin/python3", "/bin/python3")
_LANDLOCK_CREATE_RULESET, _LANDLOCK_VERSION_FLAG = 444, 1

# The child's first statements: limits, then Landlock, then the program. Kept to the standard library and free of
# our imports: it runs under a bare interpreter. Landlock's numbers are the kernel's uapi (linux/landlock.h).
_BOOTSTRAP = r"""
import os, resource, sys
if REPORT[0] != REPORT[1]:
    os.dup2(*REPORT)
    os.close(REPORT[0])
for _name, _value in LIMITS:
    resource.setrlimit(getattr(resource, _name), (_value, _value))

def _landlock():
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    abi = libc.syscall(444, None, 0, 1)
    if abi < 1:
        return
    # every write-like filesystem right this ABI knows: 1 WRITE_FILE, 4 REMOVE_DIR .. 12 MAKE_SYM, 13 REFER (ABI 2),
    # 14 TRUNCATE (ABI 3), 15 IOCTL_DEV (ABI 5); execute (0), read file (2) and read dir (3) stay unrestricted
    bits = [1] + list(range(4, 13)) + [13] * (abi >= 2) + [14] * (abi >= 3) + [15] * (abi >= 5)
    fs = sum(1 << b for b in bits)
    net = 0b11 if abi >= 4 else 0  # BIND_TCP | CONNECT_TCP, with no rule allowing any port
    scoped = 0b11 if abi >= 6 else 0  # ABSTRACT_UNIX_SOCKET | SIGNAL
    class Ruleset(ctypes.Structure):
        _fields_ = [("fs", ctypes.c_uint64), ("net", ctypes.c_uint64), ("scoped", ctypes.c_uint64)]
    class PathBeneath(ctypes.Structure):
        _pack_ = 1
        _fields_ = [("allowed", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]
    size = 8 if abi < 4 else 16 if abi < 6 else 24
    ruleset = libc.syscall(444, ctypes.byref(Ruleset(fs, net, scoped)), size, 0)
    here = os.open(".", os.O_PATH | os.O_DIRECTORY)
    if ruleset < 0 or libc.syscall(445, ruleset, 1, ctypes.byref(PathBeneath(fs, here)), 0) != 0:
        raise OSError(ctypes.get_errno(), "landlock ruleset")
    if libc.prctl(38, 1, 0, 0, 0) != 0 or libc.syscall(446, ruleset, 0) != 0:  # PR_SET_NO_NEW_PRIVS, restrict_self
        raise OSError(ctypes.get_errno(), "landlock restrict_self")
    os.close(here)
    os.close(ruleset)

if sys.platform == "linux":
    _landlock()
del _landlock, _name, _value, REPORT, LIMITS
sys.argv = ["main.py"]
with open("main.py", encoding="utf-8") as _source:
    _code = compile(_source.read(), "main.py", "exec")
del _source
exec(_code, {"__name__": "__main__", "__builtins__": __builtins__})
"""


@dataclass(frozen=True)
class Limits:
    """What one run may use. `cpu_s` defaults to the wall time rounded up: a busy loop meets whichever comes first."""

    wall_s: float = 5.0
    cpu_s: int | None = None
    memory_bytes: int = 512 * 2**20
    file_bytes: int = 16 * 2**20
    open_files: int = 64
    max_processes: int = 8
    output_bytes: int = 64 * 2**10

    def rlimits(self) -> list[tuple[str, int]]:
        cpu = self.cpu_s if self.cpu_s is not None else max(1, math.ceil(self.wall_s))
        return [
            ("RLIMIT_CPU", cpu),
            ("RLIMIT_AS", self.memory_bytes),
            ("RLIMIT_FSIZE", self.file_bytes),
            ("RLIMIT_NOFILE", self.open_files),
            ("RLIMIT_NPROC", self.max_processes),
            ("RLIMIT_CORE", 0),
        ]


@dataclass(frozen=True)
class SandboxResult:
    """How a run ended. status: "ok" (exit 0), "error" (a non-zero exit, e.g. an uncaught exception), "timeout"
    (killed at the wall-time limit) or "killed" (ended by a signal: a CPU or file-size limit, the kernel)."""

    status: str
    output: str
    report: str
    returncode: int | None
    elapsed_s: float
    output_truncated: bool = False


@cache
def _interpreter() -> str:
    """A Python the sandbox uid can run: ours if it can, else the system one (a pyenv Python under a private /root
    cannot be reached by another uid)."""
    if os.geteuid() != 0:
        return sys.executable
    for candidate in (sys.executable, *_SYSTEM_PYTHONS):
        if _runs_unprivileged(candidate):
            return candidate
    raise ValueError(
        f"sandboxed code runs as an unprivileged user, who cannot run {sys.executable} (a directory above it is "
        "private) and there is no system python3: install one (e.g. `apt-get install python3`) or run ttlearn as an "
        "ordinary user"
    )


def _run_as(uid: int, interpreter: str, code: str, **options: object) -> subprocess.CompletedProcess:
    """`interpreter -I -S -c code` as `uid` (group `uid`, no other groups), from `/` with an empty environment."""
    return subprocess.run(
        [interpreter, "-I", "-S", "-c", code],
        user=uid,
        group=uid,
        extra_groups=[],
        cwd="/",
        env={},
        stdin=subprocess.DEVNULL,
        **options,
    )


def _runs_unprivileged(interpreter: str) -> bool:
    """Whether a uid of no account can start `interpreter` and import what the bootstrap needs (probed, not guessed
    from permission bits)."""
    uid = SANDBOX_UIDS.start - 1
    try:
        probe = _run_as(uid, interpreter, "import ctypes, resource", capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):  # not found, or not executable by that uid
        return False
    return probe.returncode == 0


@cache
def landlock_abi() -> int:
    """The kernel's Landlock ABI version, 0 where it has none."""
    if sys.platform != "linux":
        return 0
    libc = ctypes.CDLL(None, use_errno=True)
    return max(0, libc.syscall(_LANDLOCK_CREATE_RULESET, None, 0, _LANDLOCK_VERSION_FLAG))


def isolation() -> dict[str, object]:
    """What keeps a sandboxed program away from the rest of the machine here (see the module docstring)."""
    root = os.geteuid() == 0
    return {
        "fresh_uid": root,
        "interpreter": _interpreter(),
        "landlock_abi": landlock_abi(),
        "files_protected": root or landlock_abi() >= 1,
        "network_blocked": landlock_abi() >= 4,
    }


class _Capped:
    """Keeps the first `limit` bytes of a stream and counts the rest."""

    def __init__(self, limit: int) -> None:
        self.limit, self.kept, self.dropped = limit, bytearray(), 0

    def add(self, chunk: bytes) -> None:
        room = max(0, self.limit - len(self.kept))
        self.kept += chunk[:room]
        self.dropped += max(0, len(chunk) - room)

    def text(self) -> str:
        return self.kept.decode("utf-8", errors="replace")


def live_pids(uids: range) -> list[int]:
    """The processes running under any of `uids`, zombies (already dead, waiting for init to reap them) left out."""
    found = []
    for entry in os.scandir("/proc"):
        try:
            if entry.name.isdigit() and entry.stat().st_uid in uids:
                with open(f"/proc/{entry.name}/stat") as stat_file:
                    if stat_file.read().rpartition(")")[2].split()[0] != "Z":
                        found.append(int(entry.name))
        except (FileNotFoundError, ProcessLookupError):
            continue
    return found


def _kill_uid(uid: int) -> None:
    """Kill every process still running as `uid`, the ones that left the process group included."""
    for _ in range(10):
        if not live_pids(range(uid, uid + 1)):
            return
        # kill(-1) from a process of that uid reaches exactly that uid's processes (and never the caller itself)
        _run_as(uid, _interpreter(), "import os; os.kill(-1, 9)", check=False)
        time.sleep(0.01)
    survivors = live_pids(range(uid, uid + 1))
    if survivors:
        warnings.warn(f"sandbox uid {uid} still runs processes {survivors} after 10 rounds of SIGKILL", stacklevel=2)


def run_python(program: str, limits: Limits = Limits()) -> SandboxResult:
    """Run `program` as `main.py` in a fresh sandbox directory (data it needs travels inside it, as literals); see the
    module docstring for what it can and cannot do. Output is decoded as UTF-8 with replacement characters."""
    uid = SANDBOX_UIDS[secrets.randbelow(len(SANDBOX_UIDS))] if os.geteuid() == 0 else None
    interpreter = _interpreter()
    with tempfile.TemporaryDirectory(prefix="ttlearn-sandbox-", ignore_cleanup_errors=True) as folder:
        main = Path(folder, "main.py")
        main.write_text(program, encoding="utf-8")
        if uid is not None:
            for path in (folder, main):
                os.chown(path, uid, uid)
        report_read, report_write = os.pipe()
        bootstrap = f"LIMITS = {limits.rlimits()!r}\nREPORT = {(report_write, REPORT_FD)!r}\n{_BOOTSTRAP}"
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": folder, "TMPDIR": folder, "LANG": "C.UTF-8"}
        started = time.perf_counter()
        try:
            process = subprocess.Popen(
                [interpreter, "-I", "-S", "-u", "-c", bootstrap],
                cwd=folder,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                pass_fds=(report_write,),
                start_new_session=True,
                user=uid,
                group=uid,
                extra_groups=None if uid is None else [],
            )
        finally:
            os.close(report_write)
        assert process.stdout is not None  # stdout=PIPE
        streams = {process.stdout.fileno(): _Capped(limits.output_bytes), report_read: _Capped(limits.output_bytes)}
        try:
            timed_out = not _pump(streams, started + limits.wall_s, process)
            _kill_group(process.pid)
            returncode = process.wait()
            if uid is not None:
                _kill_uid(uid)
            elapsed = time.perf_counter() - started
            _pump(streams, time.perf_counter() + 1.0, None)  # what the killed processes left in the pipes
        finally:
            os.close(report_read)
            process.stdout.close()
    if timed_out:
        status = "timeout"
    elif returncode < 0:
        status = "killed"
    else:
        status = "ok" if returncode == 0 else "error"
    output, report = streams.values()
    return SandboxResult(
        status, output.text(), report.text(), returncode, elapsed, bool(output.dropped or report.dropped)
    )


def _pump(streams: dict[int, _Capped], deadline: float, process: subprocess.Popen[bytes] | None) -> bool:
    """Read each stream into its buffer until `process` exits (or, with no process, until every stream ends);
    False when `deadline` passed first."""
    pidfd = os.pidfd_open(process.pid) if process is not None and hasattr(os, "pidfd_open") else None
    with selectors.DefaultSelector() as selector:
        for fd in streams:
            selector.register(fd, selectors.EVENT_READ)
        if pidfd is not None:
            selector.register(pidfd, selectors.EVENT_READ)
        try:
            while True:
                if process is not None and _exited(process.pid):
                    return True
                if process is None and not selector.get_map():
                    return True
                remaining = deadline - time.perf_counter()
                if remaining <= 0:
                    return False
                # without a pidfd, look at the process every 10 ms
                wait = remaining if pidfd is not None or process is None else min(remaining, 0.01)
                for key, _ in selector.select(wait):
                    if key.fd == pidfd:
                        continue  # the loop head sees the exit
                    chunk = os.read(key.fd, 65536)
                    if chunk:
                        streams[key.fd].add(chunk)
                    else:
                        selector.unregister(key.fd)
        finally:
            if pidfd is not None:
                os.close(pidfd)


def _exited(pid: int) -> bool:
    """Whether the process has ended, without reaping it: its process group id stays ours until we kill the group."""
    return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass
