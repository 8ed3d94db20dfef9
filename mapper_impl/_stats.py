"""Process-wide accounting of what mapper_impl holds, so tests can prove nothing leaks.

Every OS view and heap buffer registers here when it is created and unregisters from a
`weakref.finalize` callback when its memory is really released (not when an owner merely
calls close(): a view pinned by a live numpy array stays counted as a deferred unmap).
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class MapperStats:
    """A snapshot. ``is_clean()`` is what leak tests assert after closing everything."""

    live_mappings: int
    mapped_bytes: int
    live_views: int
    view_bytes: int
    heap_buffers: int
    heap_bytes: int
    deferred_unmaps: int

    def is_clean(self) -> bool:
        return not any(asdict(self).values())

    def to_dict(self) -> dict:
        return asdict(self)


class _Counters:
    def __init__(self) -> None:
        # Re-entrant: a view freed by the cyclic GC runs its finalizer (which calls add()) at
        # whatever allocation triggered the collection, possibly inside add() on this thread.
        self.lock = threading.RLock()
        self.values = dict.fromkeys(MapperStats.__dataclass_fields__, 0)

    def add(self, **deltas: int) -> None:
        with self.lock:
            for key, delta in deltas.items():
                self.values[key] += delta

    def snapshot(self) -> MapperStats:
        with self.lock:
            return MapperStats(**self.values)


COUNTERS = _Counters()


def track(
    obj: object, count_key: str, bytes_key: str, nbytes: int, on_release=None
) -> weakref.finalize:
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
    """Live mappings, mapped bytes, live region views, heap buffers and deferred unmaps."""
    return COUNTERS.snapshot()
