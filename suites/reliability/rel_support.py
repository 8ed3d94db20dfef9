"""Shared helpers for the reliability suites (plain functions, no fixtures of their own).

Every harness run here is a real ``python -m harness`` subprocess with real worker
processes; these helpers check what such a run must leave behind: one stderr line for a
user mistake, readable CSVs, and no process of the run still alive.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil

# one_line_error is shared with the other suites: the suites import it from here
from conftest import ROOT, HarnessOutcome, harness_env, one_line_error
from harness.pytest_runner import run_python

#: Fastest model that still exercises mapping, sharing and the reference check.
SMALL = ("--model-size", "8MiB")


def fd_count() -> int:
    """Open file descriptors of this process."""
    return len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else psutil.Process().num_fds()


def processes_of(out: Path) -> list[psutil.Process]:
    """Live processes whose command line names the run folder ``out`` (its workers: their
    spec path is inside it) or is a harness run writing there."""
    needle = str(out.resolve())
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        cmdline = proc.info["cmdline"] or []
        if proc.pid == os.getpid() or proc.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        if any(needle in part for part in cmdline):
            found.append(proc)
    return found


def worker_processes(out: Path) -> list[psutil.Process]:
    """Live ``harness.runner.worker`` processes of the run folder ``out``."""
    return [p for p in processes_of(out) if "harness.runner.worker" in " ".join(p.info["cmdline"] or [])]


def assert_no_survivors(out: Path, timeout: float = 5.0) -> None:
    """No process of the run outlives it (a short grace for the kernel to reap)."""
    deadline = time.monotonic() + timeout
    while True:
        alive = processes_of(out)
        if not alive or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert not alive, [" ".join(p.info["cmdline"] or []) for p in alive]


def assert_usage_error(outcome: HarnessOutcome, *expected: str) -> str:
    """Exit 2, exactly one stderr line containing every ``expected`` text, no traceback,
    nothing written to the output folder. Returns the line."""
    line = one_line_error(outcome, 2, *expected)
    assert not outcome.out.exists() or not any(outcome.out.iterdir()), sorted(outcome.out.iterdir())
    return line


def metadata(out: Path) -> dict:
    return json.loads((out / "metadata.json").read_text())


def run_args(
    *extra: str,
    processes: int = 1,
    modes: str | None = None,
    report: bool = False,
    cache: Path | None = None,
    out: Path | None = None,
    model: tuple[str, ...] = SMALL,
) -> list[str]:
    """The ``run`` command line most runs of these suites share: ``model`` (the small one
    unless given), N ``processes``, ``--modes`` only when given (else the harness's default,
    both), ``--quiet``, no report.html unless ``report``, then ``--cache-dir``, ``--out`` and
    ``extra``. Each test still names what it is about (a fault, a gate, a limit) in ``extra``."""
    args = ["run", *model, "--processes", str(processes)]
    if modes is not None:
        args += ["--modes", modes]
    args.append("--quiet")
    if not report:
        args.append("--no-report")
    if cache is not None:
        args += ["--cache-dir", str(cache)]
    if out is not None:
        args += ["--out", str(out)]
    return [*args, *extra]


def hung_worker_0(worker_timeout: str | int) -> tuple[str, ...]:
    """Worker 0 of every group hangs until ``--worker-timeout`` kills it: the other workers of
    the group are ready and wait at the barrier meanwhile, which holds a moment of the run open
    for a test to act in."""
    return ("--inject-worker-fault", "0=hang", "--worker-timeout", str(worker_timeout))


def start_harness(
    args: list[str],
    model_cache: Path,
    *,
    new_session: bool = True,
    cwd: Path = ROOT,
    preexec: Callable[[], None] | None = None,
) -> subprocess.Popen:
    """``python -m harness <args>`` in the background, as a terminal would start it: SIGINT at
    its default disposition (a background job of a non-interactive shell, or an xdist
    worker, may have inherited SIG_IGN) and, with ``new_session``, its own process group
    so a Ctrl-C to that group reaches it and its workers but never pytest. ``preexec`` runs
    in the child after that (a limit, a signal disposition of the test's own)."""

    def as_from_a_terminal() -> None:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        if preexec is not None:
            preexec()

    return subprocess.Popen(
        [sys.executable, "-m", "harness", *args],
        cwd=cwd,
        env=harness_env(model_cache),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=new_session,
        preexec_fn=as_from_a_terminal,
    )


def start_hung_run(
    out: Path,
    model_cache: Path,
    *,
    processes: int,
    worker_timeout: str | int,
    modes: str | None = None,
    cache: Path | None = None,
    preexec: Callable[[], None] | None = None,
) -> subprocess.Popen:
    """`start_harness` of a run into ``out`` whose worker 0 hangs (`hung_worker_0`)."""
    args = run_args(*hung_worker_0(worker_timeout), processes=processes, modes=modes, cache=cache, out=out)
    return start_harness(args, model_cache, preexec=preexec)


#: The --worker-timeout of a run whose hung worker 0 the test ends itself (`end_hung_worker`):
#: never reached by a run that works, so the run moves on at the test's event, not at a time
#: (a timeout of 5 or 15 s raced the other workers' start-up on a loaded 2-core machine: the
#: harness moved on before the test could act, a flaky test).
HUNG_WORKER_TIMEOUT_S = 300


def end_hung_worker(out: Path, group: str, timeout: float = 60, proc: subprocess.Popen | None = None) -> None:
    """Kill worker 0 of ``group`` (hung by `hung_worker_0`) once it exists: its group then ends
    at this event, with that worker's row saying "killed by SIGKILL", instead of waiting for
    --worker-timeout."""
    spec = os.path.join(group, "w0.spec.json")
    found: list[psutil.Process] = []

    def started() -> bool:
        found[:] = [p for p in worker_processes(out) if any(a.endswith(spec) for a in p.info["cmdline"] or [])]
        return bool(found)

    wait_for(started, timeout, f"worker 0 of {group} to start", proc)
    for hung in found:
        with contextlib.suppress(psutil.NoSuchProcess):
            hung.kill()


@contextlib.contextmanager
def first_group_waiting(
    out: Path,
    model_cache: Path,
    *,
    processes: int = 2,
    worker_timeout: str | int = HUNG_WORKER_TIMEOUT_S,
    modes: str | None = None,
    cache: Path | None = None,
    preexec: Callable[[], None] | None = None,
) -> Iterator[subprocess.Popen]:
    """`start_hung_run`, yielded once workers 1..N-1 of its first (mapped) group are ready and
    wait for the hung worker 0; the run (and its workers) is killed on the way out if it is
    still running, so a failed test leaves nothing behind."""
    proc = start_hung_run(
        out, model_cache, processes=processes, worker_timeout=worker_timeout, modes=modes, cache=cache, preexec=preexec
    )
    try:
        group = out / "workers" / f"cpu-mapped-n{processes}-r0"
        ready = [group / f"w{i}.ready.json" for i in range(1, processes)]
        wait_for(lambda: all(path.exists() for path in ready), 60, "the first group's workers 1.. to be ready", proc)
        yield proc
    finally:
        stop(proc)


def wait_for(predicate, timeout: float, what: str, proc: subprocess.Popen | None = None) -> None:
    """Poll ``predicate`` until true; fail naming ``what`` (and the process's output if it
    ended early)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if proc is not None and proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(f"harness ended (exit {proc.returncode}) before {what}\n{out}\n{err}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.02)


def stop(proc: subprocess.Popen) -> None:
    """Kill a harness subprocess a failed test left running (its workers die with the group)."""
    if proc.poll() is None:
        try:
            own_group = os.getpgid(proc.pid) == proc.pid  # never pytest's own group
        except OSError:
            own_group = False
        if own_group:
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            proc.kill()
        proc.communicate()


@contextlib.contextmanager
def unwritable(path: Path):
    """Make ``path`` (a file or folder) refuse writes for the duration, as root too: root
    ignores mode bits, so it gets the immutable attribute (``chattr +i``) instead, which the
    kernel enforces for everyone. Skips when neither is possible here."""
    import pytest

    if os.geteuid() != 0:
        mode = path.stat().st_mode
        path.chmod(0o555 if path.is_dir() else 0o444)
        try:
            yield
        finally:
            path.chmod(mode)
        return
    chattr = shutil.which("chattr")
    done = chattr and subprocess.run([chattr, "+i", str(path)], capture_output=True).returncode == 0
    if not done:
        pytest.skip("running as root without chattr +i: cannot make a path unwritable for root")
    try:
        yield
    finally:
        subprocess.run([chattr, "-i", str(path)], capture_output=True, check=True)


def char_device_like_dev_null(folder: Path) -> Path:
    """A character device that behaves like /dev/null: the real /dev/null when not root (it
    cannot be replaced then anyway), a private node with /dev/null's numbers (1, 3) as root,
    so a harness that wrongly replaced it would not damage the machine."""
    if os.geteuid() != 0:
        return Path(os.devnull)
    node = folder / "null"
    os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    return node


def run_quick(
    args: list[str], model_cache: Path, *, cwd: Path = ROOT, preexec=None, timeout: float = 300
) -> subprocess.CompletedProcess:
    """``python -m harness <args>`` to completion (no --out added), optionally with limits
    set in the child before it starts (``preexec``); through the session's fork server when
    there is one (`harness.pytest_runner.run_python`)."""
    return run_python(["-m", "harness", *args], cwd=cwd, env=harness_env(model_cache), timeout=timeout, preexec=preexec)


def matmul_model(path: Path, weight, *, batch: int | str = 1, data_file: str | None = None) -> Path:
    """y = x @ W saved at ``path``: the smallest user model the harness externalises. ``weight``
    is W, a (K, N) float32 array; ``batch`` is x's first dimension (a name makes it dynamic);
    with ``data_file``, W is saved to that external data file beside the model."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rows, cols = weight.shape
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"])],
        "matmul",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, rows])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, cols])],
        [numpy_helper.from_array(weight, "W")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    if data_file is None:
        onnx.save(model, str(path))
    else:
        external = {"all_tensors_to_one_file": True, "location": data_file, "size_threshold": 0}
        onnx.save(model, str(path), save_as_external_data=True, **external)
    return path


def kill_survivors(out: Path) -> None:
    """Cleanup after a failed orphan test: no stray worker may outlive the test session."""
    for proc in processes_of(out):
        with contextlib.suppress(psutil.Error):
            proc.kill()


_SHARED_RUNS: dict[str, Path] = {}


def shared_run(tmp_path_factory, model_cache: Path) -> Path:
    """One real run (both modes, 2 workers each, the small model), made once per test process
    and shared by every module that forges folders from it: each test copies it before changing
    anything (`copy_run`), so the original stays as the run wrote it."""
    key = str(tmp_path_factory.getbasetemp())
    if key not in _SHARED_RUNS:
        out = tmp_path_factory.mktemp("shared-run") / "run"
        proc = run_quick(run_args(processes=2, out=out), model_cache)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        _SHARED_RUNS[key] = out
    return _SHARED_RUNS[key]


def copy_run(run: Path, folder: Path) -> Path:
    """A copy of the run folder ``run`` at ``folder`` (its lock file left out)."""
    shutil.copytree(run, folder, ignore=shutil.ignore_patterns(".harness.lock"))
    return folder


def tree_state(folder: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``folder`` (links not followed) with its size and modification time:
    what "unchanged" means."""
    state = {}
    for path in folder.rglob("*"):
        st = path.lstat()
        state[str(path.relative_to(folder))] = (st.st_size, st.st_mtime_ns)
    return state


def record_as_written(out: Path, *names: str) -> None:
    """Add ``names`` to the run folder's marker, as the harness records what its run wrote."""
    from harness.core.runfiles import MARKER_NAME

    marker = json.loads((out / MARKER_NAME).read_text())
    marker["files"] = sorted({*marker["files"], *names})
    (out / MARKER_NAME).write_text(json.dumps(marker))
