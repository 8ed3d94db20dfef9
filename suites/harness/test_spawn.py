"""The process the harness measures is the worker itself.

In a Windows venv ``sys.executable`` is a launcher that starts the real interpreter as a child:
sampling ``Popen.pid`` would measure the 1-2 MB launcher. The harness starts workers the way
CPython's multiprocessing does (the base interpreter with ``__PYVENV_LAUNCHER__``), samples the
pid each worker reports for itself, and only after checking it is the spawned process or one of
its children. The Windows rule is a pure function, tested here on every OS; the Windows CI lanes
run it for real with a gate on private bytes.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys

import pytest

from conftest import kill_unfinished, line_from
from harness.contract.spawn import (
    harness_identity,
    measured_process_env,
    python_child,
    worker_interpreter,
    worker_pid_in_tree,
)


def test_windows_venv_starts_the_base_interpreter_with_the_launcher_variable():
    exe, env = worker_interpreter(r"C:\p\.venv\Scripts\python.exe", r"C:\Python311\python.exe", "win32", {"PATH": "x"})
    assert exe == r"C:\Python311\python.exe"
    assert env == {"PATH": "x", "__PYVENV_LAUNCHER__": r"C:\p\.venv\Scripts\python.exe"}


@pytest.mark.parametrize(
    ("exe", "base", "platform"),
    [
        (r"C:\Python311\python.exe", r"C:\Python311\python.exe", "win32"),  # no venv
        (r"C:\Python311\PYTHON.EXE", r"c:\python311\python.exe", "win32"),  # same file, other case
        ("/work/.venv/bin/python", "/usr/bin/python3.11", "linux"),  # POSIX venvs have no launcher
    ],
)
def test_no_launcher_no_change(exe, base, platform):
    assert worker_interpreter(exe, base, platform, {}) == (exe, None)


def test_a_reported_pid_is_sampled_only_inside_the_spawned_tree():
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys, time; "
            "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)']); "
            "print(p.pid, flush=True); time.sleep(30)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        grandchild = int(line_from(child, "grandchild pid"))
        assert worker_pid_in_tree(child.pid, child.pid)
        assert worker_pid_in_tree(child.pid, grandchild)  # a launcher in between: its child is ours
        assert not worker_pid_in_tree(child.pid, os.getpid())
        assert not worker_pid_in_tree(grandchild, child.pid)
    finally:
        import psutil

        for proc in psutil.Process(child.pid).children(recursive=True):
            proc.kill()
        child.kill()
        child.wait()
        child.stdout.close()


def test_harness_identity_is_pid_and_creation_time():
    import psutil

    pid, created = harness_identity()
    assert pid == os.getpid() and created == psutil.Process().create_time()


def test_the_sampled_pid_is_the_workers_own(run_harness):
    """Every row's pid is the pid the worker reported for itself from inside (os.getpid()),
    and each is a distinct process that is not the harness."""
    outcome = run_harness("run", "--model-size", "8MiB", "--processes", "2", "--quiet", "--no-report", check_exit=0)
    rows = outcome.results()
    reported = {}
    for path in (outcome.out / "workers").glob("*/w*.result.json"):
        group = path.parent.name
        reported[(group, int(path.name[1:].split(".")[0]))] = json.loads(path.read_text())["pid"]
    assert len(reported) == len(rows) == 4
    for row in rows:
        assert row.pid == reported[(f"cpu-{row.mode}-n2-r0", row.worker)]
        # USS where the OS gives it; where it refuses (Wine: WinError 87) the row says so and
        # private bytes are the figure (Windows' own, documented private figure)
        private = row.uss_bytes if row.uss_bytes is not None else row.private_bytes
        assert row.uss_bytes is not None or "USS not measured: " in row.memory_note, row.memory_note
        assert private and private > 5 * 1024**2, "a real Python + ORT worker, not a launcher"
    assert len({r.pid for r in rows}) == 4


#: In a child: a big block freed (glibc raises its threshold to it), then a read copy, the
#: runtime's own copy above it, and the read copy freed: what the heap path does per model.
_FREED_COPY_CHILD = """
import psutil
a = bytearray(8 << 20); del a
read = bytearray(4 << 20); read[:] = b"x" * len(read)
kept = bytearray(read)
del read
print(psutil.Process().memory_full_info().uss)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mmap threshold: Linux only")
def test_measured_processes_return_a_freed_copy_to_the_kernel():
    """With glibc's own dynamic threshold the freed 4 MiB read copy stays in the process; with the
    environment every measured worker gets (`measured_process_env`) it is gone."""
    base = {k: v for k, v in os.environ.items() if k != "MALLOC_MMAP_THRESHOLD_"}

    def uss(env: dict[str, str]) -> int:
        out = subprocess.run([sys.executable, "-c", _FREED_COPY_CHILD], env=env, capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        return int(out.stdout)

    kept_by_glibc = uss(dict(base)) - uss(measured_process_env(dict(base)))
    assert kept_by_glibc > 3 * 1024**2, kept_by_glibc
    assert measured_process_env({"MALLOC_MMAP_THRESHOLD_": "65536"})["MALLOC_MMAP_THRESHOLD_"] == "65536"
    assert measured_process_env({}, platform="win32") == {}


_THREADS_AFTER_NUMPY = "import os, numpy; print(len(os.listdir('/proc/self/task')))"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="threads counted in /proc: Linux only")
@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="numpy's BLAS starts no pool thread on one core")
def test_children_import_numpy_without_a_blas_thread_pool():
    """Every child's environment (`python_child`) keeps numpy's BLAS on one thread: importing
    numpy starts no pool thread there, where the same import with the caller's environment
    does (the negative control); a value the user set is kept."""
    base = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}

    def threads(env: dict[str, str]) -> int:
        out = subprocess.run([sys.executable, "-c", _THREADS_AFTER_NUMPY], env=env, capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        return int(out.stdout)

    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("OPENBLAS_NUM_THREADS", raising=False)
        _, child_env = python_child("harness.runner.worker")
        assert threads(child_env) == 1
        patch.setenv("OPENBLAS_NUM_THREADS", "2")
        assert python_child("harness.runner.worker")[1]["OPENBLAS_NUM_THREADS"] == "2"
    assert threads(base) > 1


@pytest.mark.skipif(sys.platform != "win32", reason="job objects: Windows (and the Wine lane)")
@pytest.mark.parametrize("assigned", [True, False])
def test_the_kill_on_close_job_ends_its_worker_on_windows(assigned):
    """`KillOnCloseJob` on the real kernel32: closing it ends a process put in it; the negative
    control, a process never put in it, outlives the close."""
    from harness.contract.spawn import KillOnCloseJob

    echo = "import sys; print(sys.stdin.readline().strip(), flush=True); sys.stdin.read()"
    child = subprocess.Popen([sys.executable, "-c", echo], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    job = KillOnCloseJob()
    try:
        if assigned:
            assert job.add(int(child._handle)) is True  # noqa: SLF001 - the handle Popen holds
        job.close()
        if assigned:  # it exits on its own only after a line and EOF, which it never gets
            child.wait(timeout=60)
        else:  # still alive after the close: it answers
            child.stdin.write("ping\n")
            child.stdin.flush()
            assert line_from(child, "echo of ping").strip() == "ping"
    finally:
        child.kill()
        child.wait()


#: A child that leaves a grandchild holding its output and outlives the runner's timeout.
_LEAVES_A_GRANDCHILD = """
import subprocess, sys, time
left = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
open(sys.argv[1], "w").write(str(left.pid))
time.sleep(120)
"""


def test_the_runners_timeout_ends_the_wait_when_a_grandchild_holds_the_output(tmp_path):
    """`run_python`'s timeout holds although a process left behind still holds the child's
    output: with pipes, Windows' ``subprocess.run`` reads them to their end after the kill and
    waited the grandchild's 120 s out (under Wine, the desktop held them for the whole session)."""
    import time

    import psutil

    from harness.pytest_runner import run_python

    pid_file = tmp_path / "grandchild.pid"
    started = time.monotonic()
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            run_python(["-c", _LEAVES_A_GRANDCHILD, str(pid_file)], cwd=tmp_path, env=dict(os.environ), timeout=5)
        assert time.monotonic() - started < 60, "the wait outlived the timeout: it waited for the grandchild"
    finally:
        if pid_file.is_file():
            with contextlib.suppress(psutil.Error, ValueError):
                psutil.Process(int(pid_file.read_text())).kill()


def test_a_child_that_never_writes_its_line_fails_the_test_instead_of_holding_it():
    """`line_from` (conftest.py), the bound on every line a Windows-run test awaits from a child."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], stdout=subprocess.PIPE, text=True)
    try:
        with pytest.raises(AssertionError, match="no ready line from child"):
            line_from(child, "ready line", timeout=1)
        child.wait(timeout=60)  # killed, not left behind
    finally:
        kill_unfinished([child])
        child.stdout.close()
