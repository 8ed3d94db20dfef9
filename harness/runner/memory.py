"""Memory figures never raising: USS/PSS or private bytes (RSS counts shared file pages in every process)."""

from __future__ import annotations

import sys
from dataclasses import dataclass

from harness.core.slack import short_of as _short


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
            sample.private_bytes, why = windows_private(info)
            notes += [why] if why else []
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        sample.note = "process exited before it could be sampled"
        return sample
    except psutil.AccessDenied:
        sample.note = "AccessDenied reading memory_info"
        return sample
    except OSError as err:  # the OS refuses every figure: the run goes on without them
        sample.note = refused_figure("RSS and private bytes", err)
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
    except OSError as err:  # the OS refuses the figure (Wine: WinError 87, see refused_figure)
        notes.append(refused_figure("USS", err))
    if sample.pss_bytes is None and sys.platform == "win32":
        notes.append("no PSS on Windows: private bytes is the figure")
    sample.note = "; ".join(notes)
    return sample


def refused_figure(figure: str, err: OSError) -> str:
    """The note of a figure the OS would not give (Wine's ``memory_full_info`` fails with WinError 87)."""
    code = getattr(err, "winerror", None) or err.errno
    text = (err.strerror or str(err)).strip()
    return f"{figure} not measured: {text}" + (f" (OS error {code})" if code else "")


def windows_private(info) -> tuple[int | None, str]:
    """(private bytes, note) from psutil's ``memory_info``: PrivateUsage, else the documented same PagefileUsage."""
    from harness.core.units import fmt_bytes

    private, pagefile = getattr(info, "private", None), getattr(info, "pagefile", None)
    if private is None or pagefile is None or private == pagefile:
        return private, ""
    return pagefile, (
        f"implausible PrivateUsage {fmt_bytes(private)} (Microsoft documents it as the same value as "
        f"PagefileUsage, {fmt_bytes(pagefile)}): private bytes read from PagefileUsage"
    )


def implausible(sample: MemorySample, private_copy_bytes: int | None, mapped_resident_bytes: int | None) -> list[str]:
    """What in ``sample`` physics does not allow: USS <= PSS <= RSS, private copies and mapped pages as floors."""
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


@dataclass
class MappedPages:
    """Pages of the weights files in one process's page tables, at the barrier."""

    resident: int | None = None  # resident bytes of those mappings (shared or not)
    private: int | None = None  # of which only this process maps (Linux: counted in its USS)


def mapped_pages(pid: int, folders: list[str]) -> MappedPages:
    """A worker's resident mapped pages of files under ``folders``, read by the parent from its maps."""
    import os

    import psutil

    roots = [os.path.normcase(os.path.realpath(f)) + os.sep for f in folders]
    try:
        maps = psutil.Process(pid).memory_maps(grouped=True)
    except (psutil.Error, OSError, NotImplementedError):
        return MappedPages()
    ours = [m for m in maps if any(os.path.normcase(m.path).startswith(r) for r in roots)]
    resident = sum(m.rss for m in ours)
    if not all(hasattr(m, "private_clean") for m in ours):
        return MappedPages(resident, None)  # Windows: file views are never private bytes
    return MappedPages(resident, sum(m.private_clean + m.private_dirty for m in ours))


@dataclass
class MachineLoad:
    """How busy the machine was while a group's timings were taken."""

    load_avg: float | None  # 1-minute load average (None where the OS has none)
    cpu_count: int
    steal_s: float | None  # CPU time the hypervisor gave other guests, cumulative (Linux)


def machine_load() -> MachineLoad:
    import os

    import psutil

    try:
        load = float(os.getloadavg()[0])
    except (OSError, AttributeError):
        load = None
    try:
        count = len(os.sched_getaffinity(0))
    except AttributeError:
        count = os.cpu_count() or 1
    steal = getattr(psutil.cpu_times(), "steal", None)
    return MachineLoad(load, count, float(steal) if steal is not None else None)


def fair_private(sample: MemorySample) -> int | None:
    """The private figure of a sample: USS, else Windows private bytes."""
    return sample.uss_bytes if sample.uss_bytes is not None else sample.private_bytes


def copied_bytes(private: int | None, control: int | None, file_private: int | None) -> tuple[int | None, str]:
    """(weight copies in a worker's private memory, why empty): private - control - private file pages, >= 0."""
    if private is None or control is None:
        return None, ""
    base = control + (file_private or 0)
    if _short(private, base):
        from harness.core.units import fmt_bytes

        return None, (
            f"implausible copied_bytes: private memory {fmt_bytes(private)} below the control's "
            f"{fmt_bytes(control)} plus {fmt_bytes(file_private or 0)} of weights-file pages"
        )
    return max(private - base, 0), ""
