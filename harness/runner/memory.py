"""Memory figures of a process and of the system, per platform, never raising.

RSS / the working set count shared file pages in every process that maps them, so summing
them over N processes cannot show what file mapping saves. USS (private pages) and PSS
(shared pages divided among their users; Linux only) can; on Windows, private bytes
(commit charge) is the figure: read-only file views are not private.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

# the sampling slack of every check: one rule for the runner at the barrier and the report
from harness.core.summary import short_of as _short


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


def implausible(sample: MemorySample, private_copy_bytes: int | None, mapped_resident_bytes: int | None) -> list[str]:
    """What in ``sample`` physics does not allow, given what the worker itself reported just
    before it reached the barrier (empty: plausible; a sample without figures is judged
    elsewhere). The rules, each a lower bound, so a disturbed or wrong sample is caught and a
    sound one never is:

    - USS <= PSS <= RSS (Linux) and USS <= RSS: private pages are resident pages, and PSS
      charges each page at most in full;
    - a worker holding private copies of the weights (heap and fallback loads: every byte was
      written by the read) has at least that much USS / private bytes, and RSS;
    - a worker's RSS covers the pages of the model's mapped files it had resident in its own
      page tables when it reported ready (its own memory maps, read then).

    A page the kernel reclaimed in between (memory pressure) breaks a rule too: that sample no
    longer shows what the worker held, so it is left out just the same."""
    from harness.core.units import fmt_bytes

    rss, uss, pss = sample.rss_bytes, sample.uss_bytes, sample.pss_bytes
    if rss is None:
        return []
    private = uss if uss is not None else sample.private_bytes
    found = []
    if uss is not None and _short(rss, uss):
        found.append(f"USS {fmt_bytes(uss)} above RSS {fmt_bytes(rss)}")
    if pss is not None and _short(rss, pss):
        found.append(f"PSS {fmt_bytes(pss)} above RSS {fmt_bytes(rss)}")
    if pss is not None and uss is not None and _short(pss, uss):
        found.append(f"USS {fmt_bytes(uss)} above PSS {fmt_bytes(pss)}")
    if private_copy_bytes:
        if private is not None and _short(private, private_copy_bytes):
            found.append(
                f"private memory {fmt_bytes(private)} below the {fmt_bytes(private_copy_bytes)} of "
                "weight copies it holds"
            )
        if _short(rss, private_copy_bytes):
            found.append(f"RSS {fmt_bytes(rss)} below the {fmt_bytes(private_copy_bytes)} of weight copies it holds")
    if mapped_resident_bytes and _short(rss, mapped_resident_bytes):
        found.append(
            f"RSS {fmt_bytes(rss)} below the {fmt_bytes(mapped_resident_bytes)} of mapped weights it had "
            "resident when it reported ready"
        )
    return [f"implausible sample: {text}" for text in found]


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
