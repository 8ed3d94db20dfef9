"""The memory split of one worker's row against its group's control worker (issue 18)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.contract.spec import WorkerRecord
from harness.runner.memory import MachineLoad, copied_bytes, fair_private


@dataclass
class Observed:
    """What the parent saw of the group as a whole at the barrier."""

    load: MachineLoad | None = None
    steal_s: float | None = None
    control: int | None = None  # the control worker's private memory
    control_note: str = ""  # why there is no control figure


def split_columns(w: Any, record: WorkerRecord, seen: Observed, copied: int | None) -> dict[str, Any]:
    """The memory split and the contention figures of one worker's row (issue 18)."""
    load = seen.load
    return {
        "mapped_resident_bytes": w.pages.resident,
        "copied_bytes": copied,
        "runtime_bytes": seen.control,
        "cpu_s": record.cpu_s,
        "busy_s": record.busy_s,
        "load_avg": load.load_avg if load else None,
        "cpu_count": load.cpu_count if load else None,
        "steal_s": seen.steal_s,
    }


def composition(w: Any, seen: Observed) -> tuple[int | None, list[str]]:
    """(copied_bytes, notes) of one worker, against the group's control."""
    if seen.control is None:
        return None, [seen.control_note] if seen.control_note else []
    value, why = copied_bytes(fair_private(w.memory), seen.control, w.pages.private)
    return value, [why] if why else []
