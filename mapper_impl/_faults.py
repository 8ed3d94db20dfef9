"""Deterministic fault injection for the mapping, region and heap paths.

A `FaultPlan` is plain configuration (frozen, picklable, so it travels in a worker spec); the
counting happens in a `FaultCursor` made fresh for each load, so the same plan gives the same
outcome every time. With no plan, nothing is called at all.
"""

from __future__ import annotations

import errno
import os
import threading
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class FaultPlan:
    """What to break, counted per load.

    - ``map_failures``: the first K mapping attempts fail with ENOMEM, as the OS does when the
      address space or commit charge runs out.
    - ``region_failures``: the first K region views fail the same way.
    - ``heap_read_failures``: the first K heap reads fail with EIO (a flaky disk or share).
    - ``platform_unavailable``: mapping is not available at all (no retry helps).
    """

    map_failures: int = 0
    region_failures: int = 0
    heap_read_failures: int = 0
    platform_unavailable: bool = False

    def __post_init__(self) -> None:
        for name in ("map_failures", "region_failures", "heap_read_failures"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"FaultPlan.{name} must be an integer >= 0, got {value!r}")
        if not isinstance(self.platform_unavailable, bool):
            value = self.platform_unavailable
            raise ValueError(f"FaultPlan.platform_unavailable must be True or False, got {value!r}")

    def to_dict(self) -> dict:
        return asdict(self)

    def cursor(self) -> FaultCursor:
        return FaultCursor(self)


def injected_os_error(code: int) -> OSError:
    """The OSError the OS itself would raise for ``code``."""
    return OSError(code, f"{os.strerror(code)} (injected by FaultPlan)")


class FaultCursor:
    """Counts attempts of one load against its plan; raises the planned OS errors."""

    def __init__(self, plan: FaultPlan) -> None:
        self.plan = plan
        self._lock = threading.Lock()
        self._counts = {"map": 0, "region": 0, "heap": 0}

    def _next(self, kind: str, limit: int) -> bool:
        with self._lock:
            self._counts[kind] += 1
            return self._counts[kind] <= limit

    @property
    def platform_unavailable(self) -> bool:
        return self.plan.platform_unavailable

    def before_map(self) -> None:
        if self._next("map", self.plan.map_failures):
            raise injected_os_error(errno.ENOMEM)

    def before_region(self) -> None:
        if self._next("region", self.plan.region_failures):
            raise injected_os_error(errno.ENOMEM)

    def before_heap_read(self) -> None:
        if self._next("heap", self.plan.heap_read_failures):
            raise injected_os_error(errno.EIO)
