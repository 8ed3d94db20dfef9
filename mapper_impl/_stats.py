"""Process-wide accounting of what mapper_impl holds, so tests can prove nothing leaks."""

from __future__ import annotations

import threading
import weakref
from dataclasses import asdict, dataclass

#: Counters that count events since the process started, not something held now.
SINCE_START = ("leaked_loads", "dma_leaked_registrations", "dma_stale_registrations")


@dataclass(frozen=True)
class MapperStats:
    """A snapshot. ``is_clean()`` is what leak tests assert after closing everything."""

    live_mappings: int  # whole-file OS views (one per mapped file, shared by its loads)
    mapped_bytes: int
    heap_buffers: int  # private copies (direct reads)
    heap_bytes: int
    deferred_unmaps: int  # views closed by mapper_impl but still pinned by a caller
    dma_registrations: int  # regions registered for DMA, pending ones included
    dma_registered_bytes: int
    dma_pending_deregistrations: int  # failed deregistrations waiting for a teardown sweep (opt-in)
    leaked_loads: int = 0  #: Loads dropped without close(), since the process started (is_clean() leaves it out).
    dma_leaked_registrations: int = 0  #: Failed deregistrations forgotten (upstream), since the process started: leaks.
    dma_stale_registrations: int = 0  #: Failed registrations left stale (#337), since the process started: leaks.

    def is_clean(self) -> bool:
        """Nothing is held: no view, copy, deferred unmap or registration."""
        return not any(v for k, v in asdict(self).items() if k not in SINCE_START)

    def leaks(self) -> dict[str, int]:
        """What a process leaked for good: forgotten deregistrations and stale registrations."""
        found = {"dma_leaked_registrations": self.dma_leaked_registrations}
        found["dma_stale_registrations"] = self.dma_stale_registrations
        return {key: value for key, value in found.items() if value}

    def to_dict(self) -> dict:
        return asdict(self)


class _Counters:
    def __init__(self) -> None:
        self.lock = threading.RLock()  # Re-entrant: the GC may run a finalizer (add()) inside add() on this thread.
        self.values = dict.fromkeys(MapperStats.__dataclass_fields__, 0)

    def add(self, **deltas: int) -> None:
        with self.lock:
            for key, delta in deltas.items():
                self.values[key] += delta

    def add_pair(self, key: str, delta: int, other: str, other_delta: int) -> None:
        """`add` of two counters, positionally (one call per DMA registration)."""
        with self.lock:
            values = self.values
            values[key] += delta
            values[other] += other_delta

    def snapshot(self) -> MapperStats:
        with self.lock:
            return MapperStats(**self.values)


COUNTERS = _Counters()


def track(obj: object, count_key: str, bytes_key: str, nbytes: int, on_release=None) -> weakref.finalize:
    """Count ``obj`` as live until it is garbage; then run ``on_release`` (the real unmap)."""
    COUNTERS.add(**{count_key: 1, bytes_key: nbytes})

    def release() -> None:
        try:
            if on_release is not None:
                on_release()
        finally:
            COUNTERS.add(**{count_key: -1, bytes_key: -nbytes})

    return weakref.finalize(obj, release)


def stats() -> MapperStats:
    """Live mappings, heap buffers, deferred unmaps and DMA registrations, process-wide."""
    return COUNTERS.snapshot()
