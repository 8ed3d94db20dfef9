"""The two attempts of `load_context`: mapped (every request made: cc7ec9e 846-903), then one direct read."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ._base import FileMapper
from ._common import ContextLoadError, FileCheckError, RegistrationError
from ._dma import DmaBackend, DmaRegistrations, keep_for_later_sweeps
from ._faults import FaultCursor
from ._lifecycle import forget_frames
from ._loaded import CreateFn, LateCallbacks, LoadedContext, StageError, describe
from ._scope import MappingScope
from ._weights import RetryPolicy, Weights, heap_weights, map_stage


@dataclass
class Load:
    """One `load_context` call's state, shared by its attempts."""

    path: str
    requests: list[tuple[int, int]]
    create: CreateFn
    cursor: FaultCursor | None
    errors: list[StageError]
    scope: MappingScope
    sweep: bool = False
    read_copy: str = "kept"
    failed_registration: str = "stale"
    map_attempts: int = 0
    late: LateCallbacks = field(default_factory=list)  #: the failed attempt's registrations awaiting release callbacks
    held: list[Weights] = field(default_factory=list)  #: the failed attempt's mapping, kept until the fallback exists

    @property
    def late_release(self) -> str:
        return self.cursor.late_release if self.cursor is not None else ""

    def release_late(self) -> None:
        """The failed attempt's release callbacks arrive now: each deregisters only its own registration."""
        late, self.late = self.late, []
        for dma, regs in late:
            self.errors += [StageError("late-release", "deregister", str(e)) for e in dma.release_late(regs)]
            if self.sweep:
                keep_for_later_sweeps(dma)

    def late_at_teardown(self) -> LateCallbacks:
        """Callbacks planned for the fallback context's teardown (`FaultPlan.late_release` "teardown")."""
        if self.late_release != "teardown":
            return []
        late, self.late = self.late, []
        return late

    def release_held(self, into: list | None = None) -> None:
        """Release the failed attempt's mapping, or hand it still mapped to ``into`` (a caller that retries itself)."""
        held, self.held = self.held, []
        if into is not None:
            into.extend(held)
            return
        for weights in held:
            weights.close()

    def call_create(self, weights: Weights, views: list[memoryview], *, with_callbacks: bool) -> Any:
        """The caller's create; injected create faults hit only the mapped attempt's creation (with callbacks)."""
        value = self.create(weights, list(views))
        if with_callbacks and self.cursor is not None:
            self.cursor.after_create(views)  # an injected failure after the work, as QNN fails
        return value


class RequestsFailed(Exception):
    """Some region request of the mapped attempt failed: the creation with callbacks fails."""


def sweep_failed(load: Load, failed: list[DmaRegistrations]) -> None:
    """The teardown sweep of a failed load: retry its failed deregistrations once."""
    for dma in failed:
        load.errors += [StageError("mapped", "deregister", str(e)) for e in dma.sweep()]


def request_regions(load: Load, weights: Weights, dma: DmaRegistrations, views: list[memoryview]) -> None:
    """QNN's DMA-data requests, one per region: every failure recorded, the next made; RequestsFailed at the end."""
    failures = dma.register_requests(load.requests, weights.request, weights.base_address, views)
    for i, err in failures:
        load.errors.append(StageError("mapped", "register", describe(err)))
        if isinstance(err, RegistrationError) and dma.undo_failed:
            weights.disable()
            left = len(load.requests) - i - 1
            if left:
                load.errors.append(
                    StageError(
                        "mapped",
                        "register",
                        f"FeatureDisabledError: {left} later request(s) refused, ABORTED: file mapping "
                        "disabled for this context after the failed registration (opt-in undo)",
                    )
                )
    if failures:
        raise RequestsFailed(f"{len(failures)} region request(s) failed")


def mapped_attempt(
    load: Load, mapper: FileMapper, policy: RetryPolicy, backend: DmaBackend
) -> tuple[LoadedContext | None, str, DmaRegistrations | None]:
    """map -> register -> create: (context, "", None), or (None, failed stage, this attempt's registrations)."""
    weights, load.map_attempts, map_errors, _ = map_stage(load.path, mapper, load.cursor, policy, load.scope.registry)
    load.errors += [StageError("mapped", "map", e) for e in map_errors]
    if weights is None:
        return None, "map", None
    if load.scope.disabled:  # an earlier failure switched its backend manager off (before #27871)
        weights.disable()
    dma = DmaRegistrations(load.path, backend, load.cursor, sweep=load.sweep, failed=load.failed_registration)
    views: list[memoryview] = []
    stage = "register"
    try:
        request_regions(load, weights, dma, views)
        stage = "create"
        value = load.call_create(weights, views, with_callbacks=True)
    except BaseException as err:
        if isinstance(err, Exception) and not isinstance(err, RequestsFailed):
            load.errors.append(StageError("mapped", stage, describe(err)))
        weights.disable()  # this context only (a per-model disable: microsoft/onnxruntime #27871)
        load.scope.disabled = load.scope.disabled or load.scope.disables == "backend-manager"
        if load.late_release and isinstance(err, Exception):
            load.late.append((dma, dma.handed_out()))  # QNN's callbacks come later; their views pin the mapping
        else:  # QNN calls the release callbacks before the retry begins
            load.errors += [StageError("mapped", "deregister", str(e)) for e in dma.release_all()]
            if load.sweep:
                keep_for_later_sweeps(dma)
        views.clear()  # a traceback must not pin the mapping
        if not isinstance(err, Exception):
            weights.close()  # no fallback follows an interrupt
            raise
        load.held.append(weights)  # still mapped, as in upstream's file mapper, during the retry
        return None, stage, dma
    context = LoadedContext(
        path=load.path,
        value=value,
        weights=weights,
        views=views,
        path_taken="mapped",
        fallback_stage="",
        errors=load.errors,
        attempts=1,
        map_attempts=load.map_attempts,
        registrations=[dma],
        sweep=load.sweep,
    )
    return context, "", None


def direct_attempt(load: Load, path_taken: str, fallback_stage: str, failed: list[DmaRegistrations]) -> LoadedContext:
    """Read the whole file into the heap, cut the regions, create; late release callbacks arrive as planned."""
    weights = None
    views: list[memoryview] = []
    stage = "read"
    at_teardown = load.late_at_teardown()
    try:
        weights = heap_weights(load.path, path_taken, load.map_attempts, [str(e) for e in load.errors], load.cursor)
        if load.late_release == "during":
            load.release_late()
        stage = "regions"
        views = [weights.region(offset, size) for offset, size in load.requests]
        stage = "create"
        value = load.call_create(weights, views, with_callbacks=False)
    except BaseException as err:
        views.clear()  # the raised error's traceback holds this frame: it must not pin the copy
        forget_frames(err)  # nor may the frames of create (its own list of the views) or the read
        if weights is not None:
            weights.close()
        load.late.extend(at_teardown)  # no context to tear down: they arrive now
        load.release_late()
        load.release_held()  # no fallback context will exist
        if not isinstance(err, Exception) or (isinstance(err, FileCheckError) and not load.errors):
            raise
        load.errors.append(StageError("direct", stage, describe(err)))
        sweep_failed(load, failed)
        raise ContextLoadError(load.path, tuple(load.errors), fallback_stage) from err
    load.release_late()  # "after": the fallback context exists now
    if load.read_copy == "transient":  # upstream's local buffer: freed once the context exists
        views = drop_views(views)
        weights.close()
    load.release_held()  # Only then the failed attempt's mapping: the start-up peak is beside it (as upstream's).
    return LoadedContext(
        path=load.path,
        value=value,
        weights=weights,
        views=views,
        path_taken=path_taken,
        fallback_stage=fallback_stage,
        errors=load.errors,
        attempts=2 if fallback_stage else 1,
        map_attempts=load.map_attempts,
        registrations=failed,
        sweep=load.sweep,
        late=at_teardown,
    )


def drop_views(views: list[memoryview]) -> list[memoryview]:
    """Release our views of a transient read copy (a ``create`` still using it in place keeps it valid)."""
    for view in views:
        try:
            view.release()
        except BufferError:
            pass
    return []
