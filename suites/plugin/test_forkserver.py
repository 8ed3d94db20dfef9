"""The fork server (`harness.forkserver`, ``--fmw-fork-server``): a run forked from it is a
process of its own, as ``subprocess.run([python, ...])`` would start it (argv, folder,
environment, streams, descriptors, signal dispositions, exit status), runs may overlap, a
timeout kills the run, and only the server's own user is served."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import psutil
import pytest

from harness.core.errors import ForkServerUnavailable
from harness.forkserver import ForkServer
from harness.pytest_runner import harness_env, session_runner

pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the fork server is Linux only"),
    pytest.mark.xdist_group("test_forkserver"),
]

#: What a run reports about itself (one JSON line on stdout).
SELF_REPORT = """
import json, os, signal, sys
print(json.dumps({
    "argv": sys.argv, "cwd": os.getcwd(), "env": os.environ.get("FMW_PROBE"),
    "fds": sorted(int(f) for f in os.listdir("/proc/self/fd")),
    "stdin": os.path.realpath("/proc/self/fd/0"),
    "sigint": signal.getsignal(signal.SIGINT) is signal.default_int_handler,
    "sigterm": signal.getsignal(signal.SIGTERM) == signal.SIG_DFL,
    "sigchld": signal.getsignal(signal.SIGCHLD) == signal.SIG_DFL,
    "path0": sys.path[0],
}))
print("to stderr", file=sys.stderr)
sys.exit(7)
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    started = ForkServer.start(tmp_path_factory.mktemp("fs"), harness_env())
    yield started
    started.close()
    assert started.proc.returncode == 0
    assert not started.socket_path.exists()


def _run(server: ForkServer, args: list[str], cwd: Path, timeout: float = 60, **extra: str):
    return server.run(args, cwd=cwd, env={**server.env, **extra}, timeout=timeout)


def test_a_forked_run_is_a_process_of_its_own(server, tmp_path):
    proc = _run(server, ["-c", SELF_REPORT, "a", "b"], tmp_path, FMW_PROBE="probe")
    assert proc.returncode == 7
    assert proc.stderr == "to stderr\n"
    seen = json.loads(proc.stdout)
    assert seen["argv"] == ["-c", "a", "b"]
    assert seen["cwd"] == str(tmp_path)
    assert seen["env"] == "probe"
    assert seen["fds"] == [0, 1, 2, 3]  # 3: the listing's own descriptor; nothing of the server's
    assert seen["stdin"] == os.devnull
    assert seen["sigint"] and seen["sigterm"] and seen["sigchld"]
    assert seen["path0"] == ""


def test_a_harness_run_reads_as_the_subprocess_one(server, tmp_path):
    """The same usage error, started both ways: the same exit code and the same words."""
    args = ["-m", "harness", "run", "--processes", "0", "--quiet"]
    env = server.env
    fresh = subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, cwd=tmp_path, env=env, stdin=subprocess.DEVNULL
    )
    forked = _run(server, args, tmp_path)
    assert (forked.returncode, forked.stdout, forked.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)
    assert forked.returncode == 2 and forked.stderr.count("\n") == 1


def test_a_signal_reads_as_minus_its_number(server, tmp_path):
    proc = _run(server, ["-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"], tmp_path)
    assert proc.returncode == -signal.SIGKILL


def test_a_timeout_kills_the_run_as_subprocess_run_does(server, tmp_path):
    pid_file = tmp_path / "pid"
    code = (
        f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); print('started', flush=True);"
        " time.sleep(600)"
    )
    with pytest.raises(subprocess.TimeoutExpired) as raised:
        _run(server, ["-c", code], tmp_path, timeout=3)
    # the output so far comes with the error; the run is gone (a run too slow to start on a
    # very busy machine has no pid file yet: then only the error is asserted)
    if pid_file.exists():
        assert "started" in (raised.value.output or "")
        pid = int(pid_file.read_text())
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_runs_overlap(server, tmp_path):
    """A run waits for a file that only a second, later run writes: served one at a time, the
    first would time out."""
    flag = tmp_path / "flag"
    waiter = (
        f"import os, time\nfor _ in range(6000):\n    if os.path.exists({str(flag)!r}): break\n"
        "    time.sleep(0.01)\nelse: raise SystemExit(9)"
    )
    results: dict[str, int] = {}
    thread = threading.Thread(target=lambda: results.update(first=_run(server, ["-c", waiter], tmp_path).returncode))
    thread.start()
    try:
        second = _run(server, ["-c", f"open({str(flag)!r}, 'w').close()"], tmp_path)
    finally:
        thread.join(120)
    assert second.returncode == 0
    assert results == {"first": 0}


def test_variables_read_at_interpreter_start_go_to_a_fresh_interpreter(server):
    assert server.serves({**server.env, "HARNESS_CACHE_DIR": "/elsewhere", "FMW_PROBE": "x"})
    for name, value in (
        ("PYTHONPATH", "/elsewhere"),
        ("LC_ALL", "C"),
        ("OPENBLAS_NUM_THREADS", "8"),
        ("LD_PRELOAD", "x"),
    ):
        assert not server.serves({**server.env, name: value}), name


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root to connect as another user")
def test_another_user_is_not_served(server, tmp_path):
    folder = server.socket_path.parent
    mode = folder.stat().st_mode
    os.chmod(folder, 0o755)  # open to anyone: only the peer check stands in the way
    os.chmod(server.socket_path, 0o777)
    try:
        pid = os.fork()
        if pid == 0:  # a stranger: exit 0 if answered, 1 if the server hung up, 2 if unreachable
            code = 3
            try:
                # the folders above are root's alone: the stranger reaches the socket through
                # a handle on its folder, opened before it became the stranger
                via = f"/proc/self/fd/{os.open(folder, os.O_PATH)}/{server.socket_path.name}"
                os.setuid(65534)
                with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
                    conn.settimeout(30)
                    conn.connect(via)
                    code = 1
                    request = json.dumps({"argv": ["-c", "pass"], "cwd": "/", "env": {}}).encode()
                    socket.send_fds(conn, [len(request).to_bytes(4, "big") + request], [1, 2])
                    code = 0 if conn.recv(64) else 1
            except (BrokenPipeError, ConnectionResetError):
                code = 1  # hung up on before or while sending
            except OSError:
                code = 2 if code == 3 else code
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
    finally:
        os.chmod(folder, mode)
    assert os.waitstatus_to_exitcode(status) == 1  # connected, sent, closed without an answer


def test_a_socket_path_too_long_is_refused_before_starting(tmp_path):
    deep = tmp_path / ("d" * 120)
    deep.mkdir()
    with pytest.raises(ForkServerUnavailable, match="socket path longer"):
        ForkServer.start(deep, harness_env())


def test_the_suites_runs_go_through_the_session_fork_server(pytestconfig, tmp_path):
    """With --fmw-fork-server (this project's addopts) a run's parent is the server's monitor;
    a preexec (a limit set in the child) still starts a fresh interpreter."""
    if not pytestconfig.getoption("fmw_fork_server"):
        pytest.skip("run without --fmw-fork-server")
    runner = session_runner()
    probe = ["-c", "import os, psutil; print(' '.join(psutil.Process(os.getppid()).cmdline()))"]
    forked = runner.python(probe, cwd=tmp_path, env=harness_env(), timeout=60)
    assert "harness.forkserver" in forked.stdout, forked
    fresh = runner.python(probe, cwd=tmp_path, env=harness_env(), timeout=60, preexec=lambda: None)
    assert "harness.forkserver" not in fresh.stdout, fresh
