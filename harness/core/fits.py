"""Start-up peaks per group and how many sessions fit a machine: a load fails at its transient
peak (the heap path holds two copies at once), against the commit limit (Windows) or available
memory (Linux), so "fits" divides the headroom by one worker's start-up peak, its assumptions
stated beside it (`ASSUMPTIONS`); `peak_projection` scales the peaks for ``--project-to``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .units import fmt_bytes
from .vocab import Mode

#: SummaryRow system columns <- attributes of the runner's SystemPeak.
SYSTEM_FIELDS = {
    "system_min_available_bytes": "min_available_bytes",
    "system_max_committed_bytes": "max_committed_bytes",
    "system_commit_limit_bytes": "commit_limit_bytes",
    "system_start_available_bytes": "start_available_bytes",
    "system_start_committed_bytes": "start_committed_bytes",
    "overcommit_mode": "overcommit_mode",
}
ASSUMPTIONS = (
    "every worker reaches its start-up peak at the same moment (workers started together, as measured)",
    "a worker's peak is its private memory (anonymous / commit charge); mapped file pages are "
    "left out: they commit nothing and the kernel can evict and re-read them",
    "the headroom is what the machine had as the group started: commit limit minus commit charge "
    "(Windows, or Linux with vm.overcommit_memory=2), otherwise available memory",
    "one worker per session as measured (M sessions per worker: its peak covers all M)",
)


def group_figures(ok: Sequence[Any], system: Any, members: Sequence[Any] = ()) -> dict[str, Any]:
    """The SummaryRow peak, system and memory-container columns of one group, from its ok
    workers' rows (the container's: all its ``members``) and what the runner recorded for it:
    (delta, noise, SystemPeak), or less (no system peak)."""
    system_peak = system[2] if isinstance(system, tuple) and len(system) > 2 else None
    peaked = [r for r in ok if r.peak_private_bytes is not None]
    # A worker the harness did not sample during its start-up (no rate) has only its own
    # phase-change samples, a lower bound: the group's peak would be no more than that, so it
    # is left empty (its ratio gate and the "fits" figure read not measured; a note says why).
    peaks = [r.peak_private_bytes for r in peaked] if all(r.peak_sample_hz is not None for r in peaked) else []
    phases = sorted({r.peak_phase for r in ok if r.peak_phase})
    out: dict[str, Any] = {
        "max_peak_private_bytes": max(peaks) if peaks else None,
        "sum_peak_private_bytes": sum(peaks) if peaks and len(peaks) == len(ok) else None,
        "peak_phase": "|".join(phases) or None,
    }
    for column, attr in SYSTEM_FIELDS.items():
        out[column] = getattr(system_peak, attr, None) if system_peak is not None else None
    return out | limit_figures(members)


def limit_figures(members: Sequence[Any]) -> dict[str, Any]:
    """The group's memory container: its limit, the workers it ended, its highest charge."""
    limited = [r for r in members if r.memory_limit_bytes is not None]
    if not limited:
        return {"memory_limit_bytes": None, "oom_workers": None, "container_peak_bytes": None}
    return {
        "memory_limit_bytes": max(r.memory_limit_bytes for r in limited),
        "oom_workers": sum(1 for r in limited if r.oom_killed),
        "container_peak_bytes": max((r.container_peak_bytes or 0 for r in limited), default=0) or None,
    }


def stated_system(row: Any) -> Any:
    """A summary row's system figures in the shape of the runner's SystemPeak (for `group_figures`)."""
    from types import SimpleNamespace

    return SimpleNamespace(**{attr: getattr(row, column, None) for column, attr in SYSTEM_FIELDS.items()})


def headroom(row: Any) -> tuple[int | None, str]:
    """(bytes the machine had free for new workers as the group started, which bound that is)."""
    limit, committed = row.system_commit_limit_bytes, row.system_start_committed_bytes
    enforced = row.overcommit_mode in (None, 2) if limit is not None else False
    if enforced and limit is not None and committed is not None:
        return max(0, limit - committed), "commit limit"
    if row.system_start_available_bytes is not None:
        return row.system_start_available_bytes, "available memory"
    return None, ""


@dataclass
class Fit:
    mode: str
    bound: str  # "commit limit" | "available memory"
    headroom_bytes: int
    per_worker_bytes: int
    sessions_per_worker: int
    workers: int  # how many workers fit
    kv_cache_bytes: int | None = None  # per worker (generate): alive at its peak, so inside per_worker_bytes

    @property
    def sessions(self) -> int:
        return self.workers * self.sessions_per_worker


def workers_fitting(mode: str, room: int, peak: int, weights_bytes: int, file_pages_count: bool) -> int:
    """Workers of ``peak`` private bytes that ``room`` holds peaking at once; mapped, where the bound
    counts file pages (available memory, a cgroup; never a commit limit), the weights take their bytes once."""
    shared = weights_bytes if mode == Mode.MAPPED and file_pages_count else 0
    return int(max(0, (room - shared) // peak)) if peak > 0 else 0


def fits(mapped: Any, heap: Any) -> dict[str, Fit]:
    """How many sessions of this model fit, per mode, from the pair's start-up peaks."""
    out = {}
    for row in (mapped, heap):
        room, bound = headroom(row)
        peak = row.max_peak_private_bytes
        if room is None or not peak:
            continue
        workers = workers_fitting(row.mode, room, peak, row.weights_bytes or 0, bound == "available memory")
        kv = row.sum_kv_cache_bytes // row.processes if getattr(row, "sum_kv_cache_bytes", None) else None
        out[row.mode] = Fit(row.mode, bound, room, peak, int(row.sessions_per_process or 1), int(workers), kv)
    return out


def fits_sentence(found: dict[str, Fit]) -> str | None:
    """ "with heap, 2 sessions of this model fit this machine's commit limit; mapped, 11 fit": what
    fits, for both modes (one figure, one meaning: before, heap said what exceeds)."""
    if not set(Mode) <= found.keys():
        return None
    heap, mapped = found[Mode.HEAP], found[Mode.MAPPED]
    return (
        f"with heap, {heap.sessions} sessions of this model fit this machine's {heap.bound} "
        f"({fmt_bytes(heap.headroom_bytes)} free at start, {fmt_bytes(heap.per_worker_bytes)} peak per worker); "
        f"mapped, {mapped.sessions} fit ({fmt_bytes(mapped.per_worker_bytes)} peak per worker)"
        + (
            f"; each peak includes the worker's KV cache ({fmt_bytes(heap.kv_cache_bytes)})"
            if heap.kv_cache_bytes
            else ""
        )
    )


def fits_document(found: dict[str, Fit]) -> dict[str, Any]:
    """headline.json's ``fits`` key."""
    return {
        "sentence": fits_sentence(found),
        "modes": {
            mode: {
                "bound": f.bound,
                "headroom_bytes": f.headroom_bytes,
                "peak_per_worker_bytes": f.per_worker_bytes,
                "sessions_fit": f.sessions,
                "kv_cache_bytes_per_worker": f.kv_cache_bytes,
            }
            for mode, f in found.items()
        },
        "assumptions": list(ASSUMPTIONS),
    }


def peak_projection(mapped: Any, heap: Any, weights_bytes: int, sessions: int) -> list[str]:
    """The start-up peak of ``sessions`` sessions of a ``weights_bytes`` model started together,
    from the measured peaks: per session, mapped costs its overhead o (its peak) and heap o + c x W,
    c = (heap peak - mapped peak) / measured weights (the copies heap holds at its peak)."""
    m_peak, h_peak, w = mapped.max_peak_private_bytes, heap.max_peak_private_bytes, heap.weights_bytes
    if not m_peak and not h_peak:
        return []  # a run from before the peak sampler: nothing to say
    if not m_peak or not h_peak or not w:
        return ["start-up peak: not projected (no start-up peak measured in both modes)"]
    per_worker = int(heap.sessions_per_process or 1)
    overhead = m_peak / per_worker
    copies = max(0.0, (h_peak - m_peak) / per_worker / w)
    heap_total = sessions * (overhead + copies * weights_bytes)
    mapped_total = sessions * overhead
    return [
        f"start-up peak of {sessions} sessions started together: heap {fmt_bytes(heap_total)} private "
        f"({copies:.2f} weight copies per session at its peak), mapped {fmt_bytes(mapped_total)} private "
        f"+ {fmt_bytes(weights_bytes)} of shared file pages",
        "Assumes the per-session overhead at the peak (the mapped peak) does not grow with the weights.",
    ]
