"""Run untrusted code (model-written Python; the SQL sandbox's child too) in a child process: its failure, loop or
mischief costs only itself.

What a sandboxed program gets, on Linux:
- its own fresh directory as working directory, HOME and TMPDIR, deleted afterwards (by `remove_tree`, which never
  recurses: a 1,100-level tree goes too); a minimal environment (no variables of ours, no secrets on any command
  line: the bootstrap holds only limits and numbers); the standard library only (`python -I -S -u`); the bytes it was
  given on stdin;
- resource limits, set before any of its code runs: CPU seconds, address space, file size, open files, processes, no
  core dumps;
- a wall-time limit; when it ends or times out, or the caller is interrupted (an exception, SIGINT), its whole
  process group (it runs in a new session) is killed; and if the caller dies outright (SIGTERM, SIGKILL), the
  kernel kills the sandbox's processes that it started (PR_SET_PDEATHSIG, `_bootstrap.py`);
- output capped: stdout and stderr together, plus the report stream on file descriptor 3, each read up to a byte
  budget and the rest discarded.

What stops it from harming anything outside its directory (each part measured by `tests/sandbox/test_sandbox.py`):
- **As root, with namespaces** (`namespaces_available()`: the kernel lets us `unshare`): fresh mount, network, PID,
  IPC and UTS namespaces. It is PID 1 of its own PID namespace with its own /proc, so it sees no other process (not
  ours, not their command lines), and when it ends the kernel kills everything it started. Its network namespace has
  only a loopback that is down. Its directory is a tmpfs of `disk_bytes` (default 64 MiB) mounted over an empty
  root-only directory: what it writes never reaches the disk and vanishes with it.
- **As root**, it then runs under a fresh unprivileged uid and gid (random, above 10^9, no supplementary groups) that
  owns only its directory: file permissions protect every other file, it cannot signal our processes, and
  `RLIMIT_NPROC` binds, so a fork bomb stops at `max_processes`. After the run any process still running under that
  uid is killed. That uid must be able to run the interpreter: `sys.executable` if a probe run as such a uid
  succeeds, else the system `python3`; with neither, `run_python` refuses with a clear error.
- **As an ordinary user** it runs as you, without namespaces; `RLIMIT_NPROC` then counts all your processes.
- **Landlock** (Linux ≥ 5.13): it may write, create and delete only inside its directory; from ABI 4 no TCP, from
  ABI 6 no signals outside its sandbox.
- **seccomp** (x86_64, root or not; `SECCOMP_SYSCALLS`): no `socket` at all (TCP, UDP, unix, raw, netlink; a
  `socketpair` stays), no extended attributes, no new namespaces (`unshare`, `setns`, `clone` with namespace flags),
  no mounts, ptrace, `process_vm_*`, keyrings, BPF, io_uring, perf events or module loading.
Without root and without Landlock, nothing but convention (its cwd and HOME) keeps it away from your files:
`isolation` says which case applies. It can always read what all users may read and use the CPU and memory its limits
allow. Its report stream is its own to write: a verdict that must not be forged comes from a process it cannot reach
(see `ttlearn.envs._code_harness`).
"""

from __future__ import annotations

import ctypes
import json
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
_NAMESPACES = 0x20000 | 0x4000000 | 0x8000000 | 0x20000000 | 0x40000000  # NEWNS, NEWUTS, NEWIPC, NEWPID, NEWNET
SECCOMP_SYSCALLS = {
    "x86_64": {
        "denied": {
            "socket": 41,
            "ptrace": 101,
            "pivot_root": 155,
            "chroot": 161,
            "mount": 165,
            "umount2": 166,
            "init_module": 175,
            "setxattr": 188,
            "lsetxattr": 189,
            "fsetxattr": 190,
            "removexattr": 197,
            "lremovexattr": 198,
            "fremovexattr": 199,
            "kexec_load": 246,
            "add_key": 248,
            "request_key": 249,
            "keyctl": 250,
            "unshare": 272,
            "perf_event_open": 298,
            "setns": 308,
            "process_vm_readv": 310,
            "process_vm_writev": 311,
            "finit_module": 313,
            "bpf": 321,
            "userfaultfd": 323,
            "io_uring_setup": 425,
            "io_uring_enter": 426,
            "io_uring_register": 427,
            "open_tree": 428,
            "move_mount": 429,
            "fsopen": 430,
            "fsconfig": 431,
            "fsmount": 432,
            "fspick": 433,
            "pidfd_getfd": 438,
            "mount_setattr": 442,
            "setxattrat": 463,
            "removexattrat": 466,
        },  # fmt: skip
        "clone": 56,
        "clone3": 435,
    }
}
"""The system calls the seccomp filter refuses (EPERM), per architecture: no socket at all (`socketpair` stays), no
extended attributes, namespaces, mounts, tracing, keyrings, BPF or io_uring; `clone` only without namespace flags and
`clone3` answers ENOSYS (its flags sit behind a pointer), so the C library falls back to `clone`."""

_BOOTSTRAP = Path(__file__).with_name("_bootstrap.py")
"""The child's own code: it locks itself down, then runs the program (see its docstring)."""


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
    disk_bytes: int = 64 * 2**20
    """What its directory may hold in all (a tmpfs this size, as root with namespaces; `file_bytes` caps one file)."""

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


@cache
def namespaces_available() -> bool:
    """Whether we may give a child fresh mount, network and PID namespaces: root, on Linux, where the kernel (or a
    container's policy) allows `unshare` (probed once)."""
    if sys.platform != "linux" or os.geteuid() != 0:
        return False
    probe = f"import ctypes, os; os._exit(ctypes.CDLL(None).unshare({_NAMESPACES}) != 0)"
    return subprocess.run([sys.executable, "-I", "-S", "-c", probe], check=False).returncode == 0


def _seccomp_syscalls() -> dict | None:
    return SECCOMP_SYSCALLS.get(os.uname().machine) if sys.platform == "linux" else None


def isolation() -> dict[str, object]:
    """What keeps a sandboxed program away from the rest of the machine here (see the module docstring)."""
    root = os.geteuid() == 0
    seccomp = _seccomp_syscalls() is not None
    return {
        "fresh_uid": root,
        "interpreter": _interpreter(),
        "landlock_abi": landlock_abi(),
        "namespaces": namespaces_available(),
        "seccomp": seccomp,
        "files_protected": root or landlock_abi() >= 1,
        "network_blocked": seccomp or namespaces_available(),
        "processes_hidden": namespaces_available(),
        "disk_capped": namespaces_available(),
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


def run_python(
    program: str, limits: Limits = Limits(), stdin: bytes = b"", files: dict[str, str] | None = None
) -> SandboxResult:
    """Run `program` as `main.py` in a fresh sandbox directory, `stdin` on its standard input (data it needs travels
    there or inside the program, as literals). Each of `files` (name: path of a file readable by all) appears in its
    directory under that name: a read-only bind mount with namespaces, else a symbolic link. See the module docstring
    for what it can and cannot do. Output is decoded as UTF-8 with replacement characters."""
    uid = SANDBOX_UIDS[secrets.randbelow(len(SANDBOX_UIDS))] if os.geteuid() == 0 else None
    isolate = namespaces_available()
    interpreter = _interpreter()
    syscalls = _seccomp_syscalls()
    seccomp = (tuple(syscalls["denied"].values()), syscalls["clone"], syscalls["clone3"]) if syscalls else None
    folder = tempfile.mkdtemp(prefix="ttlearn-sandbox-")  # 0700: with namespaces, only the root bootstrap reads it
    try:
        Path(folder, "main.py").write_text(program, encoding="utf-8")
        Path(folder, "stdin").write_bytes(stdin)
        files = {name: os.path.abspath(path) for name, path in (files or {}).items()}
        if not isolate:  # the program works in this very directory
            for name, path in files.items():
                os.symlink(path, Path(folder, name))
            for path in (folder, Path(folder, "main.py")) if uid is not None else ():
                os.chown(path, uid, uid)
        report_read, report_write = os.pipe()
        status_read, status_write = os.pipe()
        config = {
            "LIMITS": limits.rlimits(),
            "REPORT": (report_write, REPORT_FD),
            "UID": uid,
            "ISOLATE": isolate,
            "DISK": limits.disk_bytes,
            "STATUS": status_write,
            "SECCOMP": seccomp,
            "FILES": files,
            "PARENT": os.getpid(),
        }
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": folder, "TMPDIR": folder, "LANG": "C.UTF-8"}
        started = time.perf_counter()
        try:
            with open(Path(folder, "stdin"), "rb") as data:
                process = subprocess.Popen(
                    [interpreter, "-I", "-S", "-u", str(_BOOTSTRAP), json.dumps(config)],
                    cwd=folder,
                    env=env,
                    stdin=data,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    pass_fds=(report_write, status_write),
                    start_new_session=True,
                )
        finally:
            os.close(report_write)
            os.close(status_write)
        assert process.stdout is not None  # stdout=PIPE
        streams = {process.stdout.fileno(): _Capped(limits.output_bytes), report_read: _Capped(limits.output_bytes)}
        try:
            timed_out = not _pump(streams, started + limits.wall_s, process)
            _end(process, uid)
            returncode = process.wait()
            elapsed = time.perf_counter() - started
            _pump(streams, time.perf_counter() + 1.0, None)  # what the killed processes left in the pipes
            if isolate and not timed_out:  # the program's own wait status, as its reporter saw it
                status = os.read(status_read, 64)
                returncode = os.waitstatus_to_exitcode(int(status)) if status else returncode
        except BaseException:  # a signal (SIGINT, SIGTERM) or an error on the way: the sandbox ends with us
            _end(process, uid)
            raise
        finally:
            os.close(report_read)
            os.close(status_read)
            process.stdout.close()
    finally:
        remove_tree(folder)
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


def remove_tree(top: str) -> None:
    """Delete `top` and everything in it, however deep, without raising: each directory met is first moved up to
    `top` itself, so neither recursion nor path length grows with depth (`shutil.rmtree` recurses and raises
    RecursionError past ~1,000 levels). What cannot be deleted is warned about, never raised."""
    try:
        top_fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return
    pending, serial, tag = [None], 0, secrets.token_hex(8)  # directories to empty, by name in `top` (None: top)
    try:
        while pending:
            name = pending[-1]
            fd = top_fd if name is None else os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=top_fd)
            try:
                moved = []
                for entry in list(os.scandir(fd)):
                    if entry.is_dir(follow_symlinks=False) and fd == top_fd:
                        moved.append(entry.name)
                    elif entry.is_dir(follow_symlinks=False):
                        serial += 1
                        os.rename(entry.name, f".rm-{tag}-{serial}", src_dir_fd=fd, dst_dir_fd=top_fd)
                        moved.append(f".rm-{tag}-{serial}")
                    else:
                        os.unlink(entry.name, dir_fd=fd)
            finally:
                if fd != top_fd:
                    os.close(fd)
            if moved:
                pending += moved
            else:
                pending.pop()
                if name is not None:
                    os.rmdir(name, dir_fd=top_fd)
        os.close(top_fd)
        top_fd = -1
        os.rmdir(top)
    except OSError as error:
        warnings.warn(f"could not delete all of {top}: {error}", stacklevel=2)
    finally:
        if top_fd >= 0:
            os.close(top_fd)


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


def _end(process: subprocess.Popen[bytes], uid: int | None) -> None:
    """Kill the sandbox: its process group (it runs in a session of its own), then, as root, every process still
    running as its uid (those that left the group); reaps the child."""
    _kill_group(process.pid)
    process.wait()
    if uid is not None:
        _kill_uid(uid)


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass
