"""The sandbox's child, run by a bare interpreter as `python -I -S -u _bootstrap.py CONFIG` (standard library only,
none of our imports; CONFIG is JSON of limits and numbers, never a secret): it locks itself down, then runs the
program `main.py` of its directory as `__main__`. `ttlearn.sandbox.python.run_python` starts it and says what each
part guards against.

As root: fresh mount, network, PID, IPC and UTS namespaces; this process stays outside the new PID namespace to
report how the program ended (a wait status on STATUS) while a fork becomes its PID 1, mounts a /proc that shows only
its own processes and a size-capped tmpfs over its directory, and drops to the fresh uid. Then, for everyone: limits,
no-new-privileges, Landlock, seccomp, the program. Each process of the sandbox that has a parent of ours dies with
it (PR_SET_PDEATHSIG, set again after the uid changes, which clears it): a parent killed outright leaves nothing
running. Numbers are the kernel's uapi (sched.h, mount.h, landlock.h, seccomp.h, filter.h, prctl.h).
"""

import ctypes
import json
import os
import resource
import sys
import types

libc = ctypes.CDLL(None, use_errno=True)
libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]


def _check(result, what):
    if result != 0:
        raise OSError(ctypes.get_errno(), what)


def _isolate(uid, disk, status, files):
    with open("main.py", "rb") as source:
        program = source.read()
    folder = os.getcwd().encode()
    # NEWNS | NEWUTS | NEWIPC | NEWPID | NEWNET
    _check(libc.unshare(0x20000 | 0x4000000 | 0x8000000 | 0x20000000 | 0x40000000), "unshare")
    _check(libc.mount(b"none", b"/", None, 0x4000 | 0x40000, None), "make mounts private")  # MS_REC | MS_PRIVATE
    pid = os.fork()
    if pid:  # the reporter: outside the new PID namespace, holding nothing of the program's
        null = os.open("/dev/null", os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.closerange(3, status)
        os.closerange(status + 1, 1 << 16)
        os.write(status, str(os.waitpid(pid, 0)[1]).encode())
        os._exit(0)
    os.close(status)
    _die_with_parent(None)  # the reporter, outside this PID namespace
    _check(libc.mount(b"proc", b"/proc", b"proc", 2 | 4 | 8, None), "mount /proc")  # NOSUID | NODEV | NOEXEC
    options = f"size={disk},nr_inodes={max(64, disk // 4096)},mode=0700,uid={uid},gid={uid}".encode()
    _check(libc.mount(b"tmpfs", folder, b"tmpfs", 2 | 4, options), "mount tmpfs")
    os.chdir(folder)
    with open("main.py", "wb") as copy:
        copy.write(program)
    os.chown("main.py", uid, uid)
    for name, path in files.items():  # read-only bind mounts: MS_BIND, then MS_BIND | MS_REMOUNT | MS_RDONLY
        open(name, "wb").close()
        _check(libc.mount(path.encode(), name.encode(), None, 0x1000, None), f"bind {path}")
        _check(libc.mount(None, name.encode(), None, 0x1000 | 0x20 | 0x1, None), f"read-only {path}")


def _readable(files, own_proc):
    # (path, rights) the program may read beyond its directory, 1 EXECUTE | 4 READ_FILE | 8 READ_DIR: this
    # interpreter's standard library but never a site-packages below it (its directories listable, nothing in a
    # site-packages readable), the shared libraries extension modules load, a few devices, FILES' targets, and
    # /proc when it is its own (a PID namespace's)
    stdlib = [p for p in sys.path if os.path.isdir(p)]
    found = {p: 8 for p in stdlib}
    for folder in stdlib:
        for entry in os.scandir(folder):
            if entry.name not in ("site-packages", "dist-packages"):
                found.setdefault(entry.path, 13 if entry.is_dir(follow_symlinks=False) else 5)
    found.update((p, 5) for p in sys.path if os.path.isfile(p))  # python3X.zip
    mapped = set()
    with open("/proc/self/maps") as maps:
        mapped.update(line.split(None, 5)[5].strip() for line in maps if len(line.split(None, 5)) == 6)
    libraries = {
        "/lib64",
        "/usr/lib64",
        "/lib/x86_64-linux-gnu",
        "/usr/lib/x86_64-linux-gnu",
        "/lib/aarch64-linux-gnu",
        "/usr/lib/aarch64-linux-gnu",
    }
    for path in mapped - {"[heap]", "[stack]", "[vdso]", "[vvar]", "[vsyscall]"}:
        if path.startswith("/") and os.path.isfile(path):
            found.setdefault(path, 5)
            libraries.add(os.path.dirname(path))
    for folder in libraries:  # a folder above the standard library (a pyenv's lib/) holds site-packages: not it
        if os.path.isdir(folder) and not any(p.startswith(folder.rstrip("/") + "/") for p in stdlib):
            found.setdefault(os.path.realpath(folder), 13)
    for path in ("/etc/ld.so.cache", "/dev/null", "/dev/zero", "/dev/urandom", "/dev/random", *files.values()):
        if os.path.exists(path):
            found.setdefault(path, 5)
    if own_proc:
        found["/proc"] = 13
    return found


def _landlock(readable):
    abi = libc.syscall(444, None, 0, 1)
    if abi < 1:
        return
    # every filesystem right this ABI knows: 0 EXECUTE, 1 WRITE_FILE, 2 READ_FILE, 3 READ_DIR, 4 REMOVE_DIR ..
    # 12 MAKE_SYM, 13 REFER (ABI 2), 14 TRUNCATE (ABI 3), 15 IOCTL_DEV (ABI 5): writes only in its directory, reads
    # there and in `readable` only
    bits = list(range(0, 13)) + [13] * (abi >= 2) + [14] * (abi >= 3) + [15] * (abi >= 5)
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
    for path, rights in readable.items():
        try:
            fd = os.open(path, os.O_PATH)
        except OSError:
            continue
        try:
            _check(libc.syscall(445, ruleset, 1, ctypes.byref(PathBeneath(rights, fd)), 0), f"landlock rule {path}")
        finally:
            os.close(fd)
    _check(libc.syscall(446, ruleset, 0), "landlock restrict_self")
    os.close(here)
    os.close(ruleset)


def _seccomp(denied, clone, clone3):
    # x86_64 only (SECCOMP_SYSCALLS): any other architecture, and the x32 ABI, is killed outright
    class Filter(ctypes.Structure):
        _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(Filter))]

    load, equal, greater_equal, test, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    allow, kill, eperm, enosys = 0x7FFF0000, 0x80000000, 0x50000 | 1, 0x50000 | 38
    code = [
        (load, 0, 0, 4),
        (equal, 1, 0, 0xC000003E),
        (ret, 0, 0, kill),
        (load, 0, 0, 0),
        (greater_equal, 0, 1, 0x40000000),
        (ret, 0, 0, kill),
        (equal, 0, 1, clone3),
        (ret, 0, 0, enosys),
        (equal, 0, 3, clone),
        (load, 0, 0, 16),
        (test, 0, len(denied) + 1, 0x7E020000),
        (ret, 0, 0, eperm),
    ]
    code += [(equal, len(denied) - i, 0, nr) for i, nr in enumerate(denied)]  # each jumps to the final EPERM
    code += [(ret, 0, 0, allow), (ret, 0, 0, eperm)]
    rules = (Filter * len(code))(*(Filter(*c) for c in code))
    _check(libc.prctl(22, 2, ctypes.byref(Program(len(code), rules)), 0, 0), "seccomp")  # SET_SECCOMP, FILTER


def _die_with_parent(parent):
    """SIGKILL this process when the thread that started it ends (PR_SET_PDEATHSIG); if that parent (`parent`, a pid;
    None when it is not visible from here) already ended, end now."""
    if sys.platform == "linux":
        _check(libc.prctl(1, 9, 0, 0, 0), "parent-death signal")  # PR_SET_PDEATHSIG, SIGKILL
    if parent is not None and os.getppid() != parent:
        os._exit(137)


def main(config):
    _die_with_parent(config["PARENT"])
    report, uid, isolate = config["REPORT"], config["UID"], config["ISOLATE"]
    if report[0] != report[1]:
        os.dup2(*report)
        os.close(report[0])
    readable = _readable(config["FILES"], uid is not None and isolate) if sys.platform == "linux" else {}
    if uid is not None and isolate:
        _isolate(uid, config["DISK"], config["STATUS"], config["FILES"])
    for name, value in config["LIMITS"]:
        resource.setrlimit(getattr(resource, name), (value, value))
    if uid is not None:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
        _die_with_parent(None if isolate else config["PARENT"])  # a change of uid cleared it
    if sys.platform == "linux":
        _check(libc.prctl(38, 1, 0, 0, 0), "no-new-privileges")
        _landlock(readable)
        if config["SECCOMP"]:
            _seccomp(*config["SECCOMP"])
    sys.argv = ["main.py"]
    with open("main.py", encoding="utf-8") as source:
        code = compile(source.read(), "main.py", "exec")
    program = types.ModuleType("__main__")  # the program's own module: nothing of this one shows in it
    program.__builtins__ = __builtins__
    sys.modules["__main__"] = program
    exec(code, program.__dict__)


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
