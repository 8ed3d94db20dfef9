"""Process-wide accounting of what mapper_impl holds, so tests can prove nothing leaks.

Every whole-file view and heap buffer registers here when it is created and unregisters from a
`weakref.finalize` callback when its memory is really released (not when an owner merely
calls close(): a view pinned by a live numpy array or region stays counted as a deferred
unmap). DMA registrations count from register to a successful deregistration. A failed
deregistration is, as upstream, returned (MEM_ALLOC) and forgotten: the buffer stays registered
with the backend and nobody will deregister it, so it counts as a leaked registration for the
rest of the process (``dma_leaked_registrations``: never clean). With the opt-in sweep it stays
counted and pending until a teardown sweep succeeds instead. A failed registration is, as
upstream, left behind (registered, no fd, never undone): a stale registration for the rest of
the process (``dma_stale_registrations``), unless the caller opts into undoing it.
"""

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
    #: loads (Weights, LoadedContext) dropped without close(), released by their finalizer:
    #: a count since the process started, not something held (is_clean() leaves it out)
    leaked_loads: int = 0
    #: failed deregistrations forgotten (upstream's default): still registered with the backend
    #: and never undone. A count since the process started (is_clean() leaves it out, as a
    #: process cannot undo it); a worker reports any as a leak (`leaks()`).
    dma_leaked_registrations: int = 0
    #: failed registrations left behind (upstream's default: registered with RPCMem, ``to_fd``
    #: failed, never undone: onnxruntime-qnn #337's "stale FastRPC registration"). A count since
    #: the process started (is_clean() leaves it out); a worker reports any as a leak (`leaks()`).
    dma_stale_registrations: int = 0

    def is_clean(self) -> bool:
        """Nothing is held: no view, copy, deferred unmap or registration."""
        return not any(v for k, v in asdict(self).items() if k not in SINCE_START)

    def leaks(self) -> dict[str, int]:
        """What a process leaked for good: registrations nobody will deregister (failed
        deregistrations forgotten, failed registrations left stale)."""
        found = {"dma_leaked_registrations": self.dma_leaked_registrations}
        found["dma_stale_registrations"] = self.dma_stale_registrations
        return {key: value for key, value in found.items() if value}

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

    def add_pair(self, key: str, delta: int, other: str, other_delta: int) -> None:
        """`add` of two counters, positionally: one call per DMA registration of a load (a
        load registers every weight region, thousands for an LLM) with no keyword dict."""
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
