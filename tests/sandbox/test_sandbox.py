"""The sandbox: hostile programs end as one failed run within their limits, and nothing outside their directory changes.

Which guarantees hold depends on the machine (`isolation()`): tests of a guarantee this machine cannot give are
skipped with the reason, never passed vacuously.
"""

from __future__ import annotations

import os
import socket
import subprocess
import tempfile
import textwrap

import pytest
from processes import descendants, running

from ttlearn.sandbox.python import SANDBOX_UIDS, Limits, isolation, live_pids, remove_tree, run_python

FAST = Limits(wall_s=2.0)
ISOLATION = isolation()
needs_file_protection = pytest.mark.skipif(
    not ISOLATION["files_protected"], reason="neither root (fresh uid) nor Landlock here: files are not protected"
)


@pytest.fixture
def marker(tmp_path):
    """A file outside any sandbox, in a directory a sandboxed program is told the path of."""
    path = tmp_path / "outside" / "marker.txt"
    path.parent.mkdir()
    path.write_text("keep me")
    return path


def run(source: str, limits: Limits = FAST):
    return run_python(textwrap.dedent(source), limits)


def test_a_program_runs_in_its_own_fresh_directory_with_its_own_home():
    result = run(
        """
        import os
        print(os.getcwd() == os.environ["HOME"] == os.environ["TMPDIR"], sorted(os.listdir(".")))
        os.write(3, b"verdict")
        """
    )
    assert (result.status, result.returncode) == ("ok", 0)
    assert result.output.split("\n")[0] == "True ['main.py']"
    assert result.report == "verdict"
    assert result.elapsed_s < 1.5


def test_an_exception_is_an_error_with_its_output_in_order():
    result = run("print('hello'); 1 / 0")
    assert result.status == "error" and result.returncode == 1
    assert result.output.startswith("hello\n") and "ZeroDivisionError" in result.output


def test_an_infinite_loop_times_out_at_the_wall_limit():
    result = run("while True: pass", Limits(wall_s=1.0))
    assert result.status == "timeout"
    assert 1.0 <= result.elapsed_s < 2.5


def test_the_cpu_limit_kills_a_busy_program_before_a_long_wall_limit():
    result = run("while True: pass", Limits(wall_s=10.0, cpu_s=1))
    assert result.status == "killed" and result.elapsed_s < 5


def test_a_ten_gigabyte_allocation_fails_fast():
    result = run("x = bytearray(10 * 2**30)")
    assert result.status == "error" and "MemoryError" in result.output
    assert result.elapsed_s < 1.5


def test_output_is_capped():
    result = run("print('x' * 10_000_000)", Limits(wall_s=5.0, output_bytes=1000))
    assert result.status == "ok" and result.output_truncated
    assert result.output == "x" * 1000


@pytest.mark.parametrize(
    "bomb",
    [
        "while True: os.fork()",
        "while True:\n    try:\n        os.fork()\n    except OSError:\n        pass",
    ],
    ids=["crashing", "persistent"],
)
def test_a_fork_bomb_is_bounded_and_leaves_no_process(bomb):
    result = run_python(f"import os\nos.write(3, str(os.getuid()).encode())\n{bomb}", FAST)
    assert result.status in ("error", "timeout") and result.elapsed_s < FAST.wall_s + 2
    if ISOLATION["fresh_uid"]:  # that run's own uid: no process of it is left
        uid = int(result.report)
        assert uid in SANDBOX_UIDS and live_pids(range(uid, uid + 1)) == []


def test_a_process_that_leaves_the_group_is_killed_too():
    result = run(
        """
        import os, time
        try:
            pid = os.fork()
        except OSError:  # an ordinary user's RLIMIT_NPROC usually forbids any new process
            os.write(3, b"no fork")
            raise SystemExit
        if pid == 0:
            os.setsid()
            time.sleep(60)
        os.write(3, str(os.getuid()).encode())
        """
    )
    if result.report != "no fork" and ISOLATION["fresh_uid"]:  # (a PID seen inside a namespace means nothing here)
        assert live_pids(range(int(result.report), int(result.report) + 1)) == []


CALLER = """
import sys
from ttlearn.sandbox.python import Limits, run_python
run_python("while True:\\n    pass\\n", Limits(wall_s=600, cpu_s=10**6))
"""


def test_a_sandbox_dies_with_a_caller_killed_outright():
    """A caller killed by SIGKILL runs no cleanup: its sandbox (and, as root, the reporter outside its PID namespace)
    once kept running under PID 1 with the CPU limit it was given. Each process of a sandbox with a parent of ours now
    dies with that parent (PR_SET_PDEATHSIG)."""
    import signal
    import sys
    import time
    from pathlib import Path

    src = str(Path(__file__).resolve().parents[2] / "src")
    caller = subprocess.Popen([sys.executable, "-c", CALLER], env={**os.environ, "PYTHONPATH": src})
    try:
        deadline, below = time.monotonic() + 60, set()
        while time.monotonic() < deadline and len(below) < (2 if ISOLATION["namespaces"] else 1):
            time.sleep(0.1)
            below = descendants(caller.pid)
        assert below, "the sandbox did not start"
        caller.send_signal(signal.SIGKILL)
        caller.wait(timeout=10)
        deadline = time.monotonic() + 5
        while any(map(running, below)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not [pid for pid in below if running(pid)], "a sandbox process outlived its caller"
    finally:
        for pid in below if caller.poll() is not None else ():
            if running(pid):
                os.kill(pid, signal.SIGKILL)


@needs_file_protection
def test_files_outside_survive_deletion_and_overwriting(marker):
    result = run(
        f"""
        import os, shutil
        for attack in (lambda: os.remove({str(marker)!r}), lambda: open({str(marker)!r}, "w").write("gone"),
                       lambda: shutil.rmtree({str(marker.parent)!r}), lambda: os.rename({str(marker)!r}, "stolen")):
            try:
                attack()
            except OSError as error:
                print(type(error).__name__)
        os.system("rm -rf {marker.parent}")
        """
    )
    assert result.output.count("PermissionError") == 4
    assert marker.read_text() == "keep me"


@needs_file_protection
def test_rm_rf_home_removes_only_the_sandbox(marker):
    result = run(
        """
        import os
        assert os.path.expanduser("~") == os.getcwd()  # never run the next line with a real HOME
        os.system("rm -rf ~")
        print(os.listdir("."))
        """
    )
    # its directory is emptied (Landlock keeps the directory itself: removing it is a write to its parent)
    assert result.status == "ok" and result.output.strip().endswith("[]")
    assert marker.read_text() == "keep me"


@pytest.mark.skipif(ISOLATION["landlock_abi"] < 1, reason="no Landlock: a world-writable directory is open to all")
def test_world_writable_directories_are_protected_too():
    # directly under the system temp dir (pytest's tmp_path is private: a fresh uid could not even reach it)
    with tempfile.TemporaryDirectory() as shared:
        os.chmod(shared, 0o777)
        victim = os.path.join(shared, "victim")
        with open(victim, "w") as handle:
            handle.write("keep me")
        os.chmod(victim, 0o666)
        result = run(
            f"""
            import os
            for attack in (lambda: open({victim!r}, "w"), lambda: open(os.path.join({shared!r}, "planted"), "w")):
                try:
                    attack()
                except OSError as error:
                    print(type(error).__name__)
            """
        )
        assert result.output.split() == ["PermissionError", "PermissionError"]
        assert sorted(os.listdir(shared)) == ["victim"] and open(victim).read() == "keep me"


@pytest.mark.skipif(not ISOLATION["network_blocked"], reason="Landlock ABI < 4: TCP is not blocked here")
def test_tcp_connections_are_refused():
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        result = run(f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=1)")
    assert result.status == "error" and "PermissionError" in result.output


@pytest.mark.skipif(
    not (ISOLATION["fresh_uid"] or ISOLATION["landlock_abi"] >= 6), reason="signals to our processes are allowed here"
)
def test_our_processes_cannot_be_signalled():
    bystander = subprocess.Popen(["sleep", "30"])
    try:
        result = run(f"import os; os.kill({bystander.pid}, 9)")
        hidden = "ProcessLookupError" if ISOLATION["processes_hidden"] else "PermissionError"
        assert result.status == "error" and hidden in result.output
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()


@pytest.mark.skipif(not ISOLATION["network_blocked"], reason="no seccomp filter or network namespace here")
def test_udp_and_unix_sockets_are_refused_too():
    with tempfile.TemporaryDirectory() as shared, socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as listener:
        os.chmod(shared, 0o777)
        path = os.path.join(shared, "open.sock")
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as unix_server:
            unix_server.bind(path)
            unix_server.listen()
            os.chmod(path, 0o777)
            listener.bind(("127.0.0.1", 0))
            listener.settimeout(0.5)
            result = run(
                f"""
                import socket
                attacks = [
                    lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", {listener.getsockname()!r}),
                    lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).bind(("0.0.0.0", 0)),
                    lambda: socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).connect({path!r}),
                    lambda: socket.socket(socket.AF_INET6, socket.SOCK_DGRAM),
                ]
                for attack in attacks:
                    try:
                        attack()
                        print("allowed")
                    except OSError as error:
                        print(type(error).__name__)
                """
            )
            assert result.output.split() == ["PermissionError"] * 4
            with pytest.raises(TimeoutError):
                listener.recv(10)


@pytest.mark.skipif(not ISOLATION["processes_hidden"], reason="no PID namespace here: processes are visible")
def test_no_other_process_is_visible():
    result = run("import os; print(sorted(p for p in os.listdir('/proc') if p.isdigit()), os.getppid())")
    assert result.output.split("]")[0] == "['1'" and result.output.split()[-1] == "0"


@pytest.mark.skipif(not ISOLATION["seccomp"], reason="no seccomp filter for this architecture")
def test_extended_attributes_and_new_namespaces_are_refused():
    with tempfile.TemporaryDirectory() as shared:
        os.chmod(shared, 0o777)
        victim = os.path.join(shared, "victim")
        open(victim, "w").close()
        os.chmod(victim, 0o666)
        result = run(
            f"""
            import ctypes, os
            libc = ctypes.CDLL(None, use_errno=True)
            print(libc.unshare(0x10000000 | 0x40000000), ctypes.get_errno())  # NEWUSER | NEWNET
            print(libc.syscall(56, 0x10000000 | 17, 0, 0, 0, 0), ctypes.get_errno())  # clone(NEWUSER | SIGCHLD)
            for target in ({victim!r}, "main.py"):
                try:
                    os.setxattr(target, "user.mark", b"1")
                    print("allowed")
                except OSError as error:
                    print(type(error).__name__)
            """
        )
        assert result.output.split() == ["-1", "1", "-1", "1", "PermissionError", "PermissionError"]
        assert os.listxattr(victim) == []


def test_a_deep_tree_is_deleted_and_nothing_is_left(tmp_path):
    before = set(os.listdir(tempfile.gettempdir()))
    result = run(
        """
        import os
        for _ in range(1100):
            os.mkdir("d")
            os.chdir("d")
        open("secret", "w").write("x")
        print("deep")
        """
    )
    assert result.status == "ok" and result.output.strip() == "deep"
    assert not {name for name in set(os.listdir(tempfile.gettempdir())) - before if name.startswith("ttlearn-")}


def test_remove_tree_handles_depth_that_recursion_cannot(tmp_path):
    top = tmp_path / "top"  # 1,500 levels of 200-character names: past recursion and PATH_MAX, built step by step
    os.mkdir(top)
    fd = os.open(top, os.O_DIRECTORY)
    for _ in range(1500):
        os.mkdir("d" * 200, dir_fd=fd)
        child = os.open("d" * 200, os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = child
    os.close(fd)
    remove_tree(str(top))
    assert not top.exists()


@pytest.mark.skipif(not ISOLATION["disk_capped"], reason="no size-capped tmpfs here (needs root and namespaces)")
def test_the_disk_a_program_may_fill_is_capped():
    limits = Limits(wall_s=10.0, disk_bytes=32 * 2**20)
    result = run(
        """
        import os
        written = 0
        try:
            for index in range(1000):
                with open(f"f{index}", "wb") as handle:
                    for _ in range(8):
                        handle.write(b"x" * 2**20)
                        written += 2**20
        except OSError as error:
            print(type(error).__name__, error.errno, written)
        """,
        limits,
    )
    name, errno_, written = result.output.split()
    assert name == "OSError" and int(errno_) == 28 and int(written) <= 32 * 2**20  # ENOSPC at the cap
