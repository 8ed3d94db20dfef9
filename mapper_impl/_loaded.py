"""What `load_context` returns: `LoadedContext` (one context, its teardown) and `StageError`."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ._dma import DmaRegistrations, Registration, keep_for_later_sweeps, sweep_unswept
from ._lifecycle import on_drop, release_now
from ._weights import Weights

CreateFn = Callable[[Weights, list], Any]  #: ``create(weights, views) -> value``: the context over the region views.
LateCallbacks = list[tuple[DmaRegistrations, list[Registration]]]  #: A failed attempt's registrations awaiting release.


@dataclass(frozen=True)
class StageError:
    """One error: ``attempt`` (mapped, direct, late-release, teardown) and its ``stage``."""

    attempt: str
    stage: str
    message: str

    def __str__(self) -> str:
        return f"{self.attempt} {self.stage}: {self.message}"


def describe(err: BaseException) -> str:
    """``Type: message``: the type says what the message alone may not (a bare MemoryError)."""
    text = str(err)
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


class LoadedContext:
    """What `load_context` made; ``close()`` deregisters, releases and delivers teardown-planned callbacks (PR #839)."""

    def __init__(
        self,
        *,
        path: str,
        value: Any,
        weights: Weights,
        views: list[memoryview],
        path_taken: str,
        fallback_stage: str,
        errors: list[StageError],
        attempts: int,
        map_attempts: int,
        registrations: list[DmaRegistrations],
        sweep: bool = False,
        late: LateCallbacks | None = None,
    ) -> None:
        self.path = path
        self.value = value
        self.weights = weights
        self.views = tuple(views)
        self.path_taken = path_taken
        self.fallback_stage = fallback_stage
        self.errors = list(errors)
        self.attempts = attempts
        self.map_attempts = map_attempts
        self._registrations = tuple(registrations)
        self._sweep = sweep
        self._lock = threading.Lock()
        late = list(late or [])
        self._teardown = on_drop(self, _teardown, weights, self._registrations, late)  # dropped: released, counted

    @property
    def closed(self) -> bool:
        return not self._teardown.alive

    @property
    def registered(self) -> int:
        """This context's live DMA registrations (one per region on the mapped path)."""
        return sum(r.live for r in self._registrations)

    @property
    def pending_deregistrations(self) -> int:
        """Failed deregistrations of this context still waiting for a sweep (opt-in sweep)."""
        return sum(r.pending for r in self._registrations)

    @property
    def leaked_registrations(self) -> int:
        """Failed deregistrations of this context forgotten, as upstream: still registered."""
        return sum(r.leaked for r in self._registrations)

    @property
    def stale_registrations(self) -> int:
        """Failed registrations of this load left behind, as upstream: registered, never undone."""
        return sum(r.stale for r in self._registrations)

    @property
    def late_release_callbacks(self) -> int:
        """Release callbacks of the failed attempt that arrived after the retry began."""
        return sum(r.late_callbacks for r in self._registrations)

    @property
    def error_text(self) -> str:
        return "; ".join(map(str, self.errors))

    def release_registrations(self) -> None:
        """QNN's release callbacks of a context given up for a retry (the list path); the mapping stays."""
        with self._lock:
            errors = [e for dma in self._registrations for e in dma.release_all()]
            self.errors.extend(StageError("teardown", "deregister", str(e)) for e in errors)

    def close(self) -> None:
        with self._lock:
            self.value = None  # the caller's own references keep its object alive
            self.views = ()
            if self._teardown.alive:
                errors = release_now(self._teardown) or []
            else:  # a later teardown sweep of what the first one could not deregister
                swept = [e for dma in self._registrations for e in dma.sweep()]
                errors = [StageError("teardown", "deregister", str(e)) for e in swept]
            self.errors.extend(errors)
        if self._sweep:
            sweep_unswept(skip=self._registrations)  # other gone contexts' leftovers

    def __enter__(self) -> LoadedContext:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        stage = f" fallback_stage={self.fallback_stage}" if self.fallback_stage else ""
        return (
            f"<LoadedContext {self.path!r} path_taken={self.path_taken}{stage} "
            f"attempts={self.attempts}{' closed' if self.closed else ''}>"
        )


def _teardown(weights: Weights, registrations: tuple[DmaRegistrations, ...], late: LateCallbacks) -> list[StageError]:
    """Deregister all and release the memory, late callbacks on their own thread meanwhile."""
    late_errors: list[StageError] = []

    def deliver() -> None:
        for dma, regs in late:
            late_errors.extend(StageError("late-release", "deregister", str(e)) for e in dma.release_late(regs))

    callbacks = threading.Thread(target=deliver, name="late-release-callbacks") if late else None
    if callbacks is not None:
        callbacks.start()
    errors: list[StageError] = []
    try:
        for dma in registrations:
            errors += [StageError("teardown", "deregister", str(e)) for e in dma.teardown()]
    finally:
        if callbacks is not None:
            callbacks.join()
        for dma in registrations:
            keep_for_later_sweeps(dma)
        weights.close()
    return errors + late_errors
