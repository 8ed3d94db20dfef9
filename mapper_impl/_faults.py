"""Deterministic fault injection at every stage of a load: map, register, create, deregister
and the direct (heap) read.

A `FaultPlan` is plain configuration (frozen, picklable, so it travels in a worker spec); the
counting happens in a `FaultCursor` made fresh for each load, so the same plan gives the same
outcome every time. With no plan, nothing is called at all.

Injected errors look like the real ones at the boundary where the real ones appear: an
``OSError`` with the OS's own errno text for the OS calls (mapping, page locking, reading),
and the EP's context-creation failure for ``create``. The platform and DMA modules turn them
into domain errors exactly as they turn real ones.
"""

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
#: When a failed attempt's release callbacks arrive (`FaultPlan.late_release`).
LATE_RELEASE = ("", "during", "after", "teardown")


@dataclass(frozen=True)
class FaultPlan:
    """What to break, counted per load (per `load_context` / `load_weights` call).

    - ``map_failures``: the first K mapping attempts fail with ENOMEM, as the OS does when the
      address space or commit charge runs out.
    - ``register_failures``: the first K DMA registrations fail with ENOMEM: "Failed to register
      DMA data mapping to RPCMEM". As upstream's failure (``register_buf`` ran, then ``to_fd``
      returned -1), the fault strikes after the backend registered the region: what happens to
      that registration is `load_context`'s ``on_register_failure`` (left stale, upstream's
      default, or undone).
    - ``create_failures``: the first K context creations WITH the DMA callbacks (the mapped
      attempt's ``create``) fail after the caller's ``create`` ran, as a QNN
      contextCreateFromBinaryWithCallback that consumed the regions and then failed: before the
      error is raised, one byte of every page of every region it was handed is read
      (`read_every_page`), so the mapping's pages are resident. The direct read's creation
      (from a buffer, no callbacks) has no such failure and is never injected.
    - ``deregister_failures``: the first K deregistrations fail with EBUSY: MEM_ALLOC, the
      registration leaked (upstream), or kept for the next teardown sweep (opt-in sweep).
    - ``heap_read_failures``: the first K direct (heap) reads fail with EIO (a flaky disk).
    - ``register_at``: the K-th DMA registration of the load fails (K >= 1) after the K-1
      before it succeeded: the field report of foundry-local #1124 (RPC 8003, then QNN 1002
      MEM_ALLOC part way through a 7B model's regions), as ``register_failures`` fails one
      (after the backend registered it). The later requests are still made (nothing disabled
      them upstream); QNN's release callbacks deregister the ones it was given, then the direct
      read follows.
    - ``late_release``: when the mapped attempt fails, its release callbacks (QNN's, upstream
      does not deregister the failed attempt itself) arrive late: ``"during"`` the direct read
      (after the read, before the context is created from it), ``"after"`` it (once the
      fallback context exists) or at ``"teardown"`` (while the fallback context is released,
      from another thread), the lifetime races of upstream PR #839. "" (default): they arrive
      before the retry begins.
    - ``platform_unavailable``: mapping is not available at all (no retry helps).
    """

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
    """Read one byte of every page each region spans (the first byte, then one a page apart,
    then the last): the pages are then resident in this process's mapping. Returns the bytes
    read.

    Why: an injected create failure models QNN failing late in
    contextCreateFromBinaryWithCallback (e.g. MEM_ALLOC while finalizing the graph), after it
    read (and pinned) every weight region it was handed. A create that merely built objects
    over the regions (ORT's OrtValues, which read nothing at session creation) would leave the
    mapping untouched, and a fallback's start-up would look cheaper than upstream's, where the
    failed attempt's resident pages and the direct read's copy exist at once. Only a failing
    creation does this: a successful mapped creation must keep its timing and its residency."""
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
        """After the backend registered a region (upstream: ``register_buf``), where upstream's
        ``to_fd`` can return -1: raise if this registration is planned to fail."""
        failing = self._next("register", self.plan.register_failures)
        if failing or self._counts["register"] == self.plan.register_at:
            raise injected_os_error(errno.ENOMEM)

    @property
    def late_release(self) -> str:
        return self.plan.late_release

    def after_create(self, regions: Iterable[memoryview] = ()) -> None:
        """After the caller's create over ``regions`` (the registered views): fail if planned,
        having read every page of them first, as a QNN creation that fails late has."""
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
