"""Memory figures of a process and of the system, per platform, never raising.

RSS / the working set count shared file pages in every process that maps them, so summing
them over N processes cannot show what file mapping saves. USS (private pages) and PSS
(shared pages divided among their users; Linux only) can; on Windows, private bytes
(commit charge) is the figure: read-only file views are not private.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass


@dataclass
class MemorySample:
    rss_bytes: int | None = None
    uss_bytes: int | None = None
    pss_bytes: int | None = None
    private_bytes: int | None = None
    note: str = ""


def sample_process(pid: int) -> MemorySample:
    """Figures of one live process; a figure that cannot be read is None with the reason."""
    import psutil

    sample = MemorySample()
    notes = []
    try:
        proc = psutil.Process(pid)
        info = proc.memory_info()
        sample.rss_bytes = info.rss
        if sys.platform == "win32":
            sample.private_bytes = getattr(info, "private", None)
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        sample.note = "process exited before it could be sampled"
        return sample
    except psutil.AccessDenied:
        sample.note = "AccessDenied reading memory_info"
        return sample
    try:
        full = proc.memory_full_info()
        sample.uss_bytes = full.uss
        sample.pss_bytes = getattr(full, "pss", None)
        if sys.platform != "win32":
            sample.private_bytes = full.uss
    except psutil.AccessDenied:
        notes.append("AccessDenied reading USS/PSS (needs the same user or admin rights)")
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        notes.append("process exited while USS/PSS were read")
    if sample.pss_bytes is None and sys.platform == "win32":
        notes.append("no PSS on Windows: private bytes is the figure")
    sample.note = "; ".join(notes)
    return sample


def system_available_bytes() -> int:
    import psutil

    return int(psutil.virtual_memory().available)


def own_peak_bytes() -> int | None:
    """Peak resident / peak working set of the calling process."""
    try:
        if sys.platform == "win32":
            import psutil

            return int(psutil.Process().memory_info().peak_wset)
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return int(peak if sys.platform == "darwin" else peak * 1024)
    except Exception:  # a missing peak is recorded as empty, never fatal
        return None
