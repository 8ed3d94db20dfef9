"""Starting the harness's child processes (workers, the QNN compiler's child, the device probe)
so that the process we measure IS the worker, and so that no child outlives the harness.

Windows venvs: ``sys.executable`` there is the venv redirector (``.venv\\Scripts\\python.exe``),
a small launcher that starts the base interpreter as a CHILD and waits. Sampling the pid that
``Popen`` returns would measure the 1-2 MB launcher, not the worker. CPython's
``multiprocessing`` (popen_spawn_win32, bpo-35797) avoids the launcher by starting
``sys._base_executable`` with ``__PYVENV_LAUNCHER__`` set to the venv's executable, so the base
interpreter still picks up the venv; we do the same. The worker also reports its own pid, and
the parent samples that pid only once it is verified to be the spawned process or its child.

Windows has no parent-death signal: each worker is put in a job object whose last handle the
harness holds, with JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE, so when the harness dies for any
reason the kernel closes the handle and kills every worker. Linux has one: a child asks for
it first thing (`set_parent_death_signal`).
"""

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
    """(interpreter to start, environment or None to inherit), as multiprocessing does.

    Arguments default to this interpreter; they exist so the Windows rule can be tested
    anywhere."""
    executable = sys.executable if executable is None else executable
    base_executable = getattr(sys, "_base_executable", executable) if base_executable is None else base_executable
    if platform == "win32" and base_executable and not _path_eq(executable, base_executable, platform):
        env = dict(os.environ if environ is None else environ)
        env["__PYVENV_LAUNCHER__"] = executable
        return base_executable, env
    return executable, None


#: The folder holding the ``harness`` package this process runs (a checkout or site-packages).
PACKAGE_ROOT = Path(__file__).resolve().parents[2]


#: Thread counts for numpy's BLAS in every child, unless the user set one (then it is theirs).
#: No child does BLAS work (ORT has its own thread pools), but OpenBLAS starts one thread per
#: core when numpy is imported and they spin for ~0.1 s: on a 2-core machine that is 0.1 s of
#: CPU per worker (0.30 -> 0.18 CPU-s to import numpy and onnxruntime), competing with the
#: sessions the workers time, and threads in every worker's figures that ORT never uses.
CHILD_BLAS_THREADS = {"OPENBLAS_NUM_THREADS": "1"}


def python_child(module: str, *args: str) -> tuple[list[str], dict[str, str]]:
    """(command, environment) to run ``python -m module args`` as a child of the harness: the
    real interpreter (`worker_interpreter`), and this harness's own package first on
    PYTHONPATH, so the child imports the very code that started it whatever folder it runs in
    (workers, the QNN compiler child and the device probe all run in folders of their own);
    numpy's BLAS on one thread (`CHILD_BLAS_THREADS`)."""
    interpreter, env = worker_interpreter()
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(PACKAGE_ROOT), env.get("PYTHONPATH", "")) if p)
    for name, value in CHILD_BLAS_THREADS.items():
        env.setdefault(name, value)
    return [interpreter, "-m", module, *args], env


_PR_SET_PDEATHSIG = 1


def set_parent_death_signal() -> bool:
    """Linux: ask the kernel to SIGKILL this process when its parent dies, even inside a long
    native call (a hung session creation, a compile) where no Python thread would ever run
    again. Called first thing by every child of the harness. True if set."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


#: glibc's mmap threshold, fixed: a block of 128 KiB or more is its own mapping, returned to the
#: kernel when freed. Left to itself glibc raises the threshold to the size of each big block it
#: frees, so the next copies come from the heap and a freed direct-read copy stays in the
#: worker (a 3-model pipeline's heap workers held 1.8 MiB more than their weights). Windows' heap
#: gives blocks this large their own VirtualAlloc and frees them with VirtualFree, so the fixed
#: threshold makes the Linux worker's figures mean what the device's do.
GLIBC_MMAP_THRESHOLD = 128 * 1024


def measured_process_env(env: dict[str, str], platform: str = sys.platform) -> dict[str, str]:
    """``env`` for a process whose memory is measured (workers and the control): on Linux the
    fixed glibc mmap threshold, unless the user set one (then it is theirs)."""
    if platform.startswith("linux"):
        env.setdefault("MALLOC_MMAP_THRESHOLD_", str(GLIBC_MMAP_THRESHOLD))
    return env


def worker_pid_in_tree(spawned_pid: int, reported_pid: int) -> bool:
    """True when the pid a worker reported for itself is the process we spawned or one of its
    descendants (a launcher in between): anything else is not ours to sample."""
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
    """A Windows job object that kills its processes when its last handle closes (the harness
    exiting, crashing or being killed). Elsewhere every method is a no-op: Linux children use
    ``PR_SET_PDEATHSIG`` (`set_parent_death_signal`)."""

    def __init__(self) -> None:
        self._handle = None
        if sys.platform == "win32":
            self._handle = _create_kill_on_close_job()

    def add(self, process_handle: int) -> bool:
        """Put a started process in the job; False when that could not be done (the worker's
        own watchdog still ends it when the harness goes)."""
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
