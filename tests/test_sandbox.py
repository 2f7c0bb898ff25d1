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

from ttlearn.sandbox.python import SANDBOX_UIDS, Limits, isolation, live_pids, run_python

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
        os.write(3, str(pid).encode())
        """
    )
    if result.report != "no fork":
        assert int(result.report) not in live_pids(range(0, 2**32))


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
        assert result.status == "error" and "PermissionError" in result.output
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()
