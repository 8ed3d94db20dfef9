"""`load_context`: the QNN EP's pipeline for one context (one session) over a weights file.

A mapped attempt is map -> register each region -> create. If a stage fails, that attempt's
registrations are released (QNN calls the release callbacks: upstream does not deregister the
failed attempt itself) and exactly one direct-read (heap) attempt follows, which calls
``create`` again over regions of a private copy. Upstream
(onnxruntime-qnn 2.7.0, `qnn_backend_manager.cc`) does this on the single-context path:
"contextCreateFromBinaryWithCallback failed (<err>). Retrying with direct read.". The
shared-resource (list) path is `load_context_list` (`_list`).

What follows upstream by default, and what is an explicit opt-in of ours:

- Scope of the mapping (``scope``): one mapper per session, as upstream's backend-manager
  member; loads that share EP contexts pass one `MappingScope`; ``"process"`` is ours (`_scope`).
- A failed deregistration returns MEM_ALLOC and is forgotten (a leak, counted); the teardown
  sweep is ours (``sweep_deregistrations``).
- The direct-read copy (``read_copy``): ``"transient"`` is upstream's lifetime (a local freed
  once the context exists: ``create`` must make the runtime's own copy, as QNN does), so the
  heap path peaks at two copies and keeps one; ``"kept"`` (default of this API) holds the read
  copy for the context's life and ``create`` may use it in place.
- Which stage failures fall back (``fallback_stages``): all three by default, as issue 10 asks.
  Upstream's region requests and registrations run inside context creation, so a register
  failure falls back there too, but a failure of the Windows mapping step itself is fatal on
  the single-context path: ``fallback_stages=UPSTREAM_FALLBACK_STAGES`` gives exactly that.
- Falling back at all (``fallback_to_heap``); retrying the map stage (``retry``, off by default:
  upstream never retries the mapping).
- The failed attempt's mapping: upstream caches it in the backend manager's file mapper, whose
  views stay until the backend manager goes (the session's life), so it is still mapped, with
  the pages the failed creation read resident, while the direct read makes its copy. Here too
  it stays mapped (held, not closed) through the direct read and the fallback's creation: the
  start-up peak of a fallback is upstream's, the mapping and the copy at once. Deliberately,
  it is released once the fallback context exists (or the fallback fails) rather than with
  the session, so a fallback's steady figures are the fallback's own.

Every error is kept in full, in order, in ``errors`` and in the ContextLoadError raised when
the direct read fails too: a failed fallback never hides why mapping failed.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ._base import FileMapper
from ._common import ContextLoadError, FileCheckError, as_index, parse_disable_flag
from ._dma import DmaBackend, DmaRegistrations, get_backend, keep_for_later_sweeps, sweep_unswept
from ._faults import FaultCursor, FaultPlan
from ._lifecycle import forget_frames, on_drop, release_now
from ._scope import MappingScope, resolve_scope
from ._weights import RetryPolicy, Weights, check_faults, default_mapper, heap_weights, map_stage

#: The mapped attempt's stages, in order; ``fallback_stage`` is one of them (or "").
STAGES = ("map", "register", "create")
#: Upstream's strictness on Windows: a failure of the mapping step itself does not fall back.
UPSTREAM_FALLBACK_STAGES = frozenset({"register", "create"})
#: ``read_copy``: how long the direct read's copy lives (see the module docstring).
READ_COPIES = ("kept", "transient")
#: Upstream's policy (one mapping attempt), made once rather than per load.
ONE_ATTEMPT = RetryPolicy()

#: ``create(weights, views) -> value``: builds the context (e.g. an ORT session over OrtValues
#: pointing into ``views``, one read-only memoryview per requested region, in request order).
CreateFn = Callable[[Weights, list], Any]


@dataclass(frozen=True)
class StageError:
    """One error, where it happened: ``attempt`` is "mapped", "direct", "late-release" (the
    failed attempt's release callbacks arriving during or after the direct read) or
    "teardown"; ``stage`` is map / register / create / deregister (mapped), read / regions /
    create (direct) or deregister (late-release, teardown)."""

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
    """What `load_context` made. ``close()`` is the teardown: deregister every registration,
    release the mapping (or the heap copy); with the opt-in sweep, also retry failed
    deregistrations (a second close sweeps what an earlier one could not deregister)."""

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
        self._teardown = on_drop(self, _teardown, weights, self._registrations)  # dropped: released, counted

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
    def error_text(self) -> str:
        return "; ".join(map(str, self.errors))

    def release_registrations(self) -> None:
        """QNN's release callbacks of a context given up for a retry (the list path): every
        registration deregistered now, the mapping kept until ``close()``."""
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
                errors = [e for dma in self._registrations for e in dma.sweep()]
            self.errors.extend(StageError("teardown", "deregister", str(e)) for e in errors)
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


def _teardown(weights: Weights, registrations: tuple[DmaRegistrations, ...]) -> list:
    """Deregister all, release the memory. With the opt-in sweep the failures are retried
    once and leftovers stay pending for later sweeps; otherwise they are leaked (counted)."""
    errors = []
    for dma in registrations:
        errors += dma.teardown()
        keep_for_later_sweeps(dma)
    weights.close()
    return errors


def _requests(regions: Iterable) -> list[tuple[int, int]]:
    """(offset, size) pairs as ints, checked for type before any work is done; their values
    are refused (or not) by upstream's rules at the register stage."""
    requests = []
    for i, item in enumerate(regions):
        try:
            offset, size = item
        except (TypeError, ValueError):
            raise TypeError(f"regions[{i}] must be an (offset, size) pair, got {item!r}") from None
        if type(offset) is not int or type(size) is not int:  # ints (the common case) as they are
            offset, size = as_index(offset, "offset"), as_index(size, "size")
        requests.append((offset, size))
    return requests


def _fallback_stages(stages: Iterable[str]) -> frozenset[str]:
    if isinstance(stages, str):
        raise TypeError("fallback_stages must be a collection of stage names, not a str")
    stages = frozenset(stages)
    unknown = stages - set(STAGES)
    if unknown:
        raise ValueError(f"unknown fallback stage(s) {sorted(unknown)}: stages are {', '.join(STAGES)}")
    return stages


@dataclass
class _Load:
    """One `load_context` call's state, shared by its attempts."""

    path: str
    requests: list[tuple[int, int]]
    create: CreateFn
    cursor: FaultCursor | None
    errors: list[StageError]
    scope: MappingScope
    sweep: bool = False
    read_copy: str = "kept"
    map_attempts: int = 0
    #: the failed attempt's registrations whose release callbacks have not arrived yet
    late: list[DmaRegistrations] = field(default_factory=list)
    #: the failed attempt's mapping, still mapped until the fallback context exists
    held: list[Weights] = field(default_factory=list)

    @property
    def late_release(self) -> str:
        return self.cursor.late_release if self.cursor is not None else ""

    def release_late(self) -> None:
        """The failed attempt's release callbacks arrive now: each deregisters its own
        registration (by token: never anything of the fallback context)."""
        late, self.late = self.late, []
        for dma in late:
            self.errors += [StageError("late-release", "deregister", str(e)) for e in dma.release_all()]
            if self.sweep:
                keep_for_later_sweeps(dma)

    def release_held(self, into: list | None = None) -> None:
        """Release the failed attempt's mapping (after its late release callbacks: their views
        pin it), or hand it, still mapped, to ``into``: a caller that retries itself (the list
        path, `MappingScope.failed_mappings`) releases it once its retry is over."""
        held, self.held = self.held, []
        if into is not None:
            into.extend(held)
            return
        for weights in held:
            weights.close()

    def call_create(self, weights: Weights, views: list[memoryview], *, with_callbacks: bool) -> Any:
        """The caller's create. Injected create faults model "contextCreateFromBinaryWithCallback
        failed": they hit only the mapped attempt's creation (with the DMA callbacks); the direct
        read creates the context from a buffer, a call that has no such failure."""
        value = self.create(weights, list(views))
        if with_callbacks and self.cursor is not None:
            self.cursor.after_create(views)  # an injected failure after the work, as QNN fails
        return value


def _sweep_failed(load: _Load, failed: list[DmaRegistrations]) -> None:
    """The teardown sweep of a load that ends in an error: retry its failed deregistrations
    once; what still fails stays pending for later sweeps."""
    for dma in failed:
        load.errors += [StageError("mapped", "deregister", str(e)) for e in dma.sweep()]


def _mapped_attempt(
    load: _Load, mapper: FileMapper, policy: RetryPolicy, backend: DmaBackend
) -> tuple[LoadedContext | None, str, DmaRegistrations | None]:
    """map -> register -> create. Returns (context, "", None) on success, else (None, failed
    stage, this attempt's registrations: their failed deregistrations await a sweep)."""
    weights, load.map_attempts, map_errors, _ = map_stage(load.path, mapper, load.cursor, policy, load.scope.registry)
    load.errors += [StageError("mapped", "map", e) for e in map_errors]
    if weights is None:
        return None, "map", None
    dma = DmaRegistrations(load.path, backend, load.cursor, sweep=load.sweep)
    views: list[memoryview] = []
    stage = "register"
    try:
        dma.register_regions(weights, load.requests, views)
        stage = "create"
        value = load.call_create(weights, views, with_callbacks=True)
    except BaseException as err:
        if isinstance(err, Exception):
            load.errors.append(StageError("mapped", stage, describe(err)))
        weights.disable()  # this context only: the next request would be ABORTED
        if load.late_release and isinstance(err, Exception):
            load.late.append(dma)  # QNN's release callbacks come later; their views pin the mapping
        else:  # QNN calls the release callbacks before the retry begins
            load.errors += [StageError("mapped", "deregister", str(e)) for e in dma.release_all()]
            if load.sweep:
                keep_for_later_sweeps(dma)
        views.clear()  # and the loop's last view: a traceback must not pin the mapping
        view = None  # noqa: F841
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


def _direct_attempt(load: _Load, path_taken: str, fallback_stage: str, failed: list[DmaRegistrations]) -> LoadedContext:
    """Read the whole file into the heap, cut the regions, create. ContextLoadError (with
    every earlier error) if it fails; a FileCheckError on a first attempt stays itself.
    Late release callbacks of the failed attempt (`FaultPlan.late_release`) arrive after the
    read ("during") or after the creation ("after"), and in any case before this returns;
    the failed attempt's mapping (`_Load.held`) stays mapped until then, on every path."""
    weights = None
    views: list[memoryview] = []
    stage = "read"
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
        load.release_late()
        load.release_held()  # no fallback context will exist
        if not isinstance(err, Exception) or (isinstance(err, FileCheckError) and not load.errors):
            raise
        load.errors.append(StageError("direct", stage, describe(err)))
        _sweep_failed(load, failed)
        raise ContextLoadError(load.path, tuple(load.errors), fallback_stage) from err
    load.release_late()  # "after": the fallback context exists now
    load.release_held()  # and so the failed attempt's mapping goes (upstream: with the session)
    if load.read_copy == "transient":  # upstream's local buffer: freed once the context exists
        views = _drop_views(views)
        weights.close()
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
    )


def _drop_views(views: list[memoryview]) -> list[memoryview]:
    """Release our region views of a transient read copy; one ``create`` still uses in place
    (exported to numpy or ORT) keeps that memory valid until it lets go."""
    for view in views:
        try:
            view.release()
        except BufferError:
            pass
    return []


def load_context(
    path: str | os.PathLike,
    regions: Iterable,
    create: CreateFn,
    *,
    disable_file_mapped_weights: bool | str,
    faults: FaultPlan | None = None,
    fallback_to_heap: bool = True,
    fallback_stages: Iterable[str] = STAGES,
    retry: RetryPolicy | None = None,
    mapper: FileMapper | None = None,
    dma_backend: str | DmaBackend = "bookkeeping",
    scope: str | MappingScope | None = "session",
    sweep_deregistrations: bool = False,
    read_copy: str = "kept",
) -> LoadedContext:
    """Create one context over the weights file at ``path`` the way the QNN EP does.

    ``regions``: the (offset, size) weight regions the context asks for (any integer types).
    ``create(weights, views)``: the caller's context creation; ``views`` are read-only
    memoryviews of the regions, in order (``base + offset`` in the shared mapping, or slices
    of the private copy on the direct path: ``weights.path_taken`` says which). Its return
    value is ``LoadedContext.value``.
    ``disable_file_mapped_weights``: "1"/True goes straight to the direct read (no default:
    always pass it, as upstream's open proposal to change its default advises).
    ``scope``: "session" (a mapping of its own, upstream), "process" (ours), or one
    `MappingScope` shared by loads that share EP contexts. ``sweep_deregistrations``: keep
    failed deregistrations and retry them at teardown (ours; upstream forgets them).
    ``read_copy``: "kept" or "transient" (upstream's lifetime of the direct-read copy).

    Raises FileCheckError for an unusable file (never a fallback), ContextLoadError when every
    allowed path failed (all stage errors kept), TypeError/ValueError for bad arguments (before
    any work)."""
    disabled = parse_disable_flag(disable_file_mapped_weights)
    if read_copy not in READ_COPIES:
        raise ValueError(f"read_copy must be one of {', '.join(READ_COPIES)}, got {read_copy!r}")
    if not callable(create):
        raise TypeError(f"create must be callable, got {type(create).__name__}")
    requests = _requests(regions)
    stages = _fallback_stages(fallback_stages)
    if retry is not None and not isinstance(retry, RetryPolicy):
        raise TypeError(f"retry must be a RetryPolicy or None, got {type(retry).__name__}")
    backend = get_backend(dma_backend)
    cursor = check_faults(faults)
    load = _Load(
        os.fspath(path), requests, create, cursor, [], resolve_scope(scope), bool(sweep_deregistrations), read_copy
    )
    if disabled:
        return _direct_attempt(load, "heap", "", [])
    context, stage, dma = _mapped_attempt(load, default_mapper(mapper), retry or ONE_ATTEMPT, backend)
    if context is not None:
        return context
    failed = [dma] if dma is not None else []
    if not fallback_to_heap or stage not in stages:
        load.release_late()  # no retry to race with
        load.release_held(into=load.scope.failed_mappings)  # unless the caller retries itself
        _sweep_failed(load, failed)
        raise ContextLoadError(load.path, tuple(load.errors), stage)
    return _direct_attempt(load, "fallback", stage, failed)
