"""Deterministic fault injection at every stage of a load: a frozen `FaultPlan`, a fresh `FaultCursor` per load."""

from __future__ import annotations

import errno
import mmap
import os
import threading
from collections.abc import Iterable
from dataclasses import asdict, dataclass

#: Which cursor counter each FaultPlan count field drives.
_COUNTS = {
    "map_failures": "map",
    "register_failures": "register",
    "create_failures": "create",
    "deregister_failures": "deregister",
    "heap_read_failures": "heap",
}

INJECTED = "injected by FaultPlan"
LATE_RELEASE = ("", "during", "after", "teardown")  #: When a failed attempt's release callbacks arrive.


@dataclass(frozen=True)
class FaultPlan:
    """What to break, counted per load; ``register_at`` is foundry-local #1124, ``late_release`` the PR #839 races."""

    map_failures: int = 0
    register_failures: int = 0
    create_failures: int = 0
    deregister_failures: int = 0
    heap_read_failures: int = 0
    register_at: int = 0
    late_release: str = ""
    platform_unavailable: bool = False

    def __post_init__(self) -> None:
        for name in _COUNTS:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"FaultPlan.{name} must be an integer >= 0, got {value!r}")
        if not isinstance(self.register_at, int) or isinstance(self.register_at, bool) or self.register_at < 0:
            raise ValueError(f"FaultPlan.register_at must be an integer >= 0, got {self.register_at!r}")
        if self.late_release not in LATE_RELEASE:
            raise ValueError(f"FaultPlan.late_release must be one of {LATE_RELEASE}, got {self.late_release!r}")
        if not isinstance(self.platform_unavailable, bool):
            value = self.platform_unavailable
            raise ValueError(f"FaultPlan.platform_unavailable must be True or False, got {value!r}")

    def to_dict(self) -> dict:
        return asdict(self)

    def cursor(self) -> FaultCursor:
        return FaultCursor(self)


def read_every_page(regions: Iterable[memoryview]) -> int:
    """Read one byte of every page of each region (a failing QNN creation read them all); returns the bytes read."""
    page = mmap.PAGESIZE
    read = 0
    for region in regions:
        if len(region):
            read += len(bytes(region[::page])) + len(bytes(region[-1:]))
    return read


def injected_os_error(code: int) -> OSError:
    """The OSError the OS itself would raise for ``code``."""
    return OSError(code, f"{os.strerror(code)} ({INJECTED})")


class InjectedCreateError(RuntimeError):
    """What a failed QNN context creation looks like to the caller of ``create``."""


class FaultCursor:
    """Counts one load's calls of each stage against its plan; raises the planned errors."""

    def __init__(self, plan: FaultPlan) -> None:
        self.plan = plan
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(_COUNTS.values(), 0)

    def _next(self, kind: str, limit: int) -> bool:
        with self._lock:
            self._counts[kind] += 1
            return self._counts[kind] <= limit

    def counts(self) -> dict[str, int]:
        """How often each stage was reached in this load (tests read it)."""
        with self._lock:
            return dict(self._counts)

    @property
    def platform_unavailable(self) -> bool:
        return self.plan.platform_unavailable

    def before_map(self) -> None:
        if self._next("map", self.plan.map_failures):
            raise injected_os_error(errno.ENOMEM)

    def after_register(self) -> None:
        """After the backend registered a region (upstream's ``to_fd`` can fail): raise if planned."""
        failing = self._next("register", self.plan.register_failures)
        if failing or self._counts["register"] == self.plan.register_at:
            raise injected_os_error(errno.ENOMEM)

    @property
    def late_release(self) -> str:
        return self.plan.late_release

    def after_create(self, regions: Iterable[memoryview] = ()) -> None:
        """After the caller's create: fail if planned, having read every page of ``regions`` first."""
        if self._next("create", self.plan.create_failures):
            read_every_page(regions)
            raise InjectedCreateError(
                f"contextCreateFromBinaryWithCallback failed (QNN_COMMON_ERROR_SYSTEM) ({INJECTED})"
            )

    def before_deregister(self) -> None:
        if self._next("deregister", self.plan.deregister_failures):
            raise injected_os_error(errno.EBUSY)

    def before_heap_read(self) -> None:
        if self._next("heap", self.plan.heap_read_failures):
            raise injected_os_error(errno.EIO)
