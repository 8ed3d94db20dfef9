"""What a group's memory is made of and how busy the machine was while it was measured.

Kept apart from `harness.core.summary` (which calls it per group): the split of a worker's
memory into weight copies, mapped weight pages and the control worker's runtime, and the
contention rule that makes a group's timings "contended" (issue 18).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from typing import Any

from .schema import ResultRow
from .vocab import Start


def _median(values: Iterable[float | int | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


#: A worker whose CPU time is below this share of its wall time waited for a CPU (issue 18).
MIN_CPU_SHARE = 0.5


def contention(members: list[ResultRow]) -> dict[str, Any]:
    """Highest load average, lowest CPU share and whether the group's timings were contended:
    load above the CPU count (sequential pass: other processes' CPUs, `foreign_cpus`, above
    cpu_count - 1, as the load average lags a minute), or a worker under `MIN_CPU_SHARE` of a CPU."""
    loads = [r.load_avg for r in members if r.load_avg is not None]
    shares = [r.cpu_s / r.busy_s for r in members if r.cpu_s is not None and r.busy_s]
    counts = [r.cpu_count for r in members if r.cpu_count]
    foreign = [r.foreign_cpus for r in members if r.foreign_cpus is not None]
    load = max(loads) if loads else None
    share = min(shares) if shares else None
    most = max(foreign) if foreign else None
    if load is None and share is None:
        return {"load_avg": None, "cpu_share_min": None, "contended": None, "foreign_cpus_max": most}
    cpus = min(counts) if counts else None
    if members and all(r.start == Start.SEQUENTIAL and r.foreign_cpus is not None for r in members):
        queued = cpus is not None and most is not None and most > cpus - 1
    else:
        queued = load is not None and cpus is not None and load > cpus
    busy = queued or (share is not None and share < MIN_CPU_SHARE)
    return {"load_avg": load, "cpu_share_min": share, "contended": busy, "foreign_cpus_max": most}


def composition(ok: list[ResultRow]) -> dict[str, Any]:
    """The summary's split of the ok workers' memory (copies, mapped pages, the control) and
    its contention figures."""
    runtime = {r.runtime_bytes for r in ok if r.runtime_bytes is not None}
    copied = _median(r.copied_bytes for r in ok)
    resident = _median(r.mapped_resident_bytes for r in ok)
    return {
        "copied_bytes_median": int(copied) if copied is not None else None,
        "mapped_resident_bytes_median": int(resident) if resident is not None else None,
        "runtime_bytes": next(iter(runtime)) if len(runtime) == 1 else None,
        **contention(ok),
    }
