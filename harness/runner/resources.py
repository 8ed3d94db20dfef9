"""The machine's limits (descriptors, address space, disk) checked before work, and words for running out."""

from __future__ import annotations

import errno
import os
import sys

from harness.core.errors import InputError
from harness.core.units import fmt_bytes

FDS_PER_WORKER = 2  #: Descriptors the harness holds per live worker: its log file and the write end of its stdin.
SPARE_FDS = 16  #: Descriptors a run opens besides (temp files, records, /proc reads, spawn pipes).
WORKER_MIN_FDS = 16  #: A worker process needs at least this many for itself (Python, ORT, its files: ~10 measured).

DISK_FULL = {errno.ENOSPC, errno.EFBIG, getattr(errno, "EDQUOT", errno.ENOSPC)}
NO_FDS = {errno.EMFILE, errno.ENFILE}


def describe(err: BaseException, doing: str) -> str:
    """One line for a resource failure while ``doing`` (e.g. "writing results.csv")."""
    if isinstance(err, MemoryError):
        return (
            f"out of memory {doing} (MemoryError: the model, its input shapes (--shape, --input), --model-size or "
            "--processes need more memory than there is, or raise the memory limit)"
        )
    code = getattr(err, "errno", None)
    text = getattr(err, "strerror", None) or str(err) or type(err).__name__
    if code in DISK_FULL:
        hint = "; the file-size limit (ulimit -f) was reached" if code == errno.EFBIG else ""
        return f"disk full {doing} ({text}{hint})"
    if code in NO_FDS:
        return f"out of file descriptors {doing} ({text}; raise ulimit -n)"
    if code in (errno.ENOMEM, errno.EAGAIN):
        return f"out of memory or processes {doing} ({text})"
    return f"{doing} failed ({text})"


def open_fds() -> int | None:
    """Open descriptors of this process, where the OS says (Linux /proc, psutil elsewhere)."""
    if os.path.isdir("/proc/self/fd"):
        return len(os.listdir("/proc/self/fd"))
    try:
        import psutil

        return psutil.Process().num_fds()
    except (AttributeError, OSError, ImportError):
        return None


def check_fd_limit(processes: int) -> None:
    """Refuse a group larger than the open-file limit allows (POSIX)."""
    if sys.platform == "win32":
        return
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    now = open_fds()
    if soft == resource.RLIM_INFINITY or now is None:
        return
    need = max(now + FDS_PER_WORKER * processes + SPARE_FDS, WORKER_MIN_FDS)
    if soft < need:
        raise InputError(
            f"--processes {processes}: the harness needs about {need} open files ({FDS_PER_WORKER} per "
            f"worker, {now} open now) but the limit is {soft} (ulimit -n); raise it or lower --processes"
        )


WORKER_MIN_ADDRESS_SPACE = 320 * 1024**2  #: Address space a worker needs before weights (289-293 MiB of VMS measured).


def check_address_space(weights_bytes: int, copies: int = 1) -> None:
    """Refuse when ``ulimit -v`` cannot hold even one worker with ``copies`` of the weights."""
    if sys.platform == "win32":
        return
    import resource

    import psutil

    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return
    base = max(int(psutil.Process().memory_info().vms), WORKER_MIN_ADDRESS_SPACE)
    need = base + copies * weights_bytes
    if soft < need:
        raise InputError(
            f"the address-space limit (ulimit -v) is {fmt_bytes(soft)} but a worker needs at least "
            f"{fmt_bytes(need)} ({fmt_bytes(base)} for Python, onnxruntime and a session + "
            f"{copies} x {fmt_bytes(weights_bytes)} of weights); raise the limit or lower --model-size"
        )
