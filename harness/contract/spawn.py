"""Starting the harness's children so that the measured process is the worker and none outlives the harness."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Mapping
from pathlib import Path


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


#: The folder holding the ``harness`` package this process runs (a checkout or site-packages).
PACKAGE_ROOT = Path(__file__).resolve().parents[2]


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


#: glibc's mmap threshold, fixed, so a freed big copy goes back to the kernel (as Windows' VirtualFree does).
GLIBC_MMAP_THRESHOLD = 128 * 1024


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
