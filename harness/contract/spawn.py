"""Starting the harness's children so that the measured process is the worker and none outlives the harness."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any


def _path_eq(a: str, b: str, platform: str) -> bool:
    """Same path, compared as the platform does (Windows: case-insensitive, either slash)."""
    import ntpath
    import posixpath

    normcase = ntpath.normcase if platform == "win32" else posixpath.normcase
    return a == b or normcase(a) == normcase(b)


def worker_interpreter(
    executable: str | None = None,
    base_executable: str | None = None,
    platform: str = sys.platform,
    environ: Mapping[str, str] | None = None,
) -> tuple[str, dict[str, str] | None]:
    """(interpreter, environment or None), as multiprocessing does (arguments make it testable anywhere)."""
    executable = sys.executable if executable is None else executable
    base_executable = getattr(sys, "_base_executable", executable) if base_executable is None else base_executable
    if platform == "win32" and base_executable and not _path_eq(executable, base_executable, platform):
        env = dict(os.environ if environ is None else environ)
        env["__PYVENV_LAUNCHER__"] = executable
        return base_executable, env
    return executable, None


PACKAGE_ROOT = Path(__file__).resolve().parents[2]  #: The folder of the ``harness`` package this process runs.


#: One BLAS thread in every child unless the user set one: OpenBLAS's idle spinning cost each worker ~0.1 CPU-s.
CHILD_BLAS_THREADS = {"OPENBLAS_NUM_THREADS": "1"}


def python_child(module: str, *args: str) -> tuple[list[str], dict[str, str]]:
    """(command, environment) for ``python -m module args`` as a child: the real interpreter, this package first."""
    interpreter, env = worker_interpreter()
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(PACKAGE_ROOT), env.get("PYTHONPATH", "")) if p)
    for name, value in CHILD_BLAS_THREADS.items():
        env.setdefault(name, value)
    return [interpreter, "-m", module, *args], env


def run_job(
    module: str, job: dict, log: IO[bytes] | int, folder: Path, *, timeout_s: float, poll_s: float, on_status=None
) -> tuple[int | None, dict | None]:
    """``python -m module JOB.json`` in ``folder``, its output in ``log``, each new status line to ``on_status``:
    (exit code, or None past ``timeout_s``; its result, or None). Killed when interrupted or past the deadline."""
    import json
    import subprocess

    job = dict(job, result=str(folder / "result.json"), status=str(folder / "status.txt"))
    (folder / "job.json").write_text(json.dumps(job), encoding="utf-8")
    command, env = python_child(module, str(folder / "job.json"))
    # cwd: what native libraries write beside them (QNN's saver_output/) stays with the job
    proc = subprocess.Popen(
        command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd=folder, env=env
    )
    try:
        code = _wait_reporting(proc, Path(job["status"]), timeout_s, poll_s, on_status)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    try:
        return code, json.loads(Path(job["result"]).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return code, None


def _wait_reporting(proc: Any, status: Path, timeout_s: float, poll_s: float, on_status) -> int | None:
    import subprocess
    import time

    deadline, said = time.monotonic() + timeout_s, ""
    while True:
        try:
            return proc.wait(timeout=max(0.0, min(poll_s, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            if time.monotonic() >= deadline:
                return None
        if on_status is not None:
            with contextlib.suppress(OSError):
                text = status.read_text(encoding="utf-8", errors="replace").strip()[:200]
                if text and text != said:
                    said = text
                    on_status(text)


def tell_status(job: dict, text: str) -> None:
    """In a `run_job` child: what it is doing now, for the parent's progress line (best effort)."""
    with contextlib.suppress(OSError, KeyError, TypeError):
        Path(job["status"]).write_text(text, encoding="utf-8")


def signal_name(code: int) -> str:
    """The signal that ended a child whose exit code is ``code`` (< 0): "SIGKILL", or "signal N"."""
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


_PR_SET_PDEATHSIG = 1


def set_parent_death_signal() -> bool:
    """Linux: SIGKILL this process when its parent dies, even inside a long native call; True if set."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


GLIBC_MMAP_THRESHOLD = 128 * 1024  #: fixed, so a freed big copy goes back to the kernel (as VirtualFree does)


def measured_process_env(env: dict[str, str], platform: str = sys.platform) -> dict[str, str]:
    """``env`` for a measured process: on Linux the fixed glibc mmap threshold, unless the user set one."""
    if platform.startswith("linux"):
        env.setdefault("MALLOC_MMAP_THRESHOLD_", str(GLIBC_MMAP_THRESHOLD))
    return env


def worker_pid_in_tree(spawned_pid: int, reported_pid: int) -> bool:
    """True when the pid a worker reported is the process we spawned or a descendant."""
    if reported_pid == spawned_pid:
        return True
    import psutil

    try:
        return any(child.pid == reported_pid for child in psutil.Process(spawned_pid).children(recursive=True))
    except psutil.Error:
        return False


def harness_identity() -> tuple[int, float]:
    """(pid, creation time) of this process: what workers watch (pids are reused)."""
    import psutil

    return os.getpid(), psutil.Process().create_time()


class KillOnCloseJob:
    """A Windows job object that kills its processes when its last handle closes; a no-op elsewhere."""

    def __init__(self) -> None:
        self._handle = None
        if sys.platform == "win32":
            self._handle = _create_kill_on_close_job()

    def add(self, process_handle: int) -> bool:
        """Put a started process in the job; False when it could not be (the worker's watchdog remains)."""
        if self._handle is None:
            return False
        return _assign(self._handle, process_handle)

    def close(self) -> None:
        handle, self._handle = self._handle, None
        if handle is not None:
            _kernel32().CloseHandle(handle)


def _kernel32():
    """kernel32 with every signature declared (`mapper_impl._winapi`, the one bindings module)."""
    from mapper_impl._winapi import load

    return load("kernel32")


def _create_kill_on_close_job():
    import ctypes

    from mapper_impl._winapi import (
        JOB_OBJECT_EXTENDED_LIMIT_INFORMATION_CLASS,
        JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE,
        JOBOBJECT_EXTENDED_LIMIT_INFORMATION,
    )

    k32 = _kernel32()
    handle = k32.CreateJobObjectW(None, None)
    if not handle:
        return None
    info = JOBOBJECT_EXTENDED_LIMIT_INFORMATION()
    info.BasicLimitInformation.LimitFlags = JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE
    if not k32.SetInformationJobObject(
        handle, JOB_OBJECT_EXTENDED_LIMIT_INFORMATION_CLASS, ctypes.byref(info), ctypes.sizeof(info)
    ):
        k32.CloseHandle(handle)
        return None
    return handle


def _assign(job, process_handle: int) -> bool:
    return bool(_kernel32().AssignProcessToJobObject(job, process_handle))
