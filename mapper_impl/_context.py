"""`load_context`: the QNN EP's pipeline for one context (one session) over a weights file.

A mapped attempt is map -> request and register each region -> create. If the registration
stage or the creation fails, that attempt's registrations are released (QNN calls the release
callbacks: upstream does not deregister the failed attempt itself) and exactly one
direct-read (heap) attempt follows, which calls ``create`` again over regions of a private
copy. Upstream (onnxruntime-qnn 2.7.0, `qnn_backend_manager.cc`) does this on the
single-context path: "contextCreateFromBinaryWithCallback failed (<err>). Retrying with direct
read.". A failure of the mapping step itself fails the load there (cc7ec9e
qnn_backend_manager.cc 1416-1422: ``ORT_RETURN_IF_ERROR`` around the file mapper, before any
creation). The shared-resource (list) path is `load_context_list` (`_list`); the attempts
themselves are in `_attempts`.

What follows upstream by default, and what is an explicit opt-in of ours:

- Which stage failures fall back (``fallback_stages``): register and create
  (`UPSTREAM_FALLBACK_STAGES`); a failed mapping step raises ContextLoadError. ``STAGES`` (map
  too) is the lenient opt-in: not upstream behaviour.
- A failed registration (``failed_registration``): left behind, "stale" (registered, no fd,
  never undone: cc7ec9e 886-893), and the later requests are still made; "undo" is the
  unmerged fix of onnxruntime-qnn PR #337 (undo it, refuse the later requests).
- Scope of the mapping (``scope``): one mapper per session, as upstream's backend-manager
  member; loads that share EP contexts pass one `MappingScope`; ``"process"`` is ours (`_scope`).
- A failed deregistration returns MEM_ALLOC and is forgotten (a leak, counted); the teardown
  sweep is ours (``sweep_deregistrations``).
- The direct-read copy (``read_copy``): ``"transient"`` is upstream's lifetime (a local freed
  once the context exists: ``create`` must make the runtime's own copy, as QNN does), so the
  heap path peaks at two copies and keeps one; ``"kept"`` (default of this API) holds the read
  copy for the context's life and ``create`` may use it in place.
- Falling back at all (``fallback_to_heap``); retrying the map stage (``retry``, off by default:
  upstream never retries the mapping).
- The failed attempt's mapping: upstream caches it in the backend manager's file mapper, whose
  views stay until the backend manager goes (the session's life), so it is still mapped, with
  the pages the failed creation read resident, while the direct read makes its copy. Here too
  it stays mapped (held, not closed) through the direct read and the fallback's creation: the
  start-up peak of a fallback is upstream's, the mapping and the copy at once. Deliberately,
  it is released once the fallback context exists (or the fallback fails) rather than with
  the session, so a fallback's steady figures are the fallback's own (unless release callbacks
  planned for teardown still pin it); a transient read copy is freed before it, as upstream's
  local is freed long before its cached view, so the peak is always beside the mapping.

Every error is kept in full, in order, in ``errors`` and in the ContextLoadError raised when
the direct read fails too: a failed fallback never hides why mapping failed.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from itertools import chain

from ._attempts import Load, direct_attempt, mapped_attempt, sweep_failed
from ._base import FileMapper
from ._common import ContextLoadError, as_index, parse_disable_flag
from ._dma import FAILED_REGISTRATIONS, DmaBackend, get_backend
from ._faults import FaultPlan
from ._loaded import CreateFn, LoadedContext, StageError, describe
from ._scope import MappingScope, resolve_scope
from ._weights import RetryPolicy, check_faults, default_mapper

__all__ = [
    "FAILED_REGISTRATIONS",
    "READ_COPIES",
    "STAGES",
    "UPSTREAM_FALLBACK_STAGES",
    "CreateFn",
    "LoadedContext",
    "StageError",
    "describe",
    "load_context",
]

#: The mapped attempt's stages, in order; ``fallback_stage`` is one of them (or "").
STAGES = ("map", "register", "create")
#: Upstream's single-context path: a failure of the mapping step itself does not fall back
#: (the default of `load_context`); ``STAGES`` is the lenient opt-in.
UPSTREAM_FALLBACK_STAGES = frozenset({"register", "create"})
#: Upstream's policy (one mapping attempt), made once rather than per load.
ONE_ATTEMPT = RetryPolicy()
#: ``read_copy``: how long the direct read's copy lives (see the module docstring).
READ_COPIES = ("kept", "transient")


_TUPLE, _PAIR, _INT = {tuple}, {2}, {int}


def _requests(regions: Iterable) -> list[tuple[int, int]]:
    """(offset, size) pairs as ints, checked for type before any work is done; their values
    are refused (or not) by upstream's rules at the register stage. A list of int pairs (what
    a caller that read its regions from a file has) is taken in one pass over it (a load has
    thousands of regions, inside the timed part), anything else item by item."""
    if (
        type(regions) is list
        and set(map(type, regions)) <= _TUPLE
        and set(map(len, regions)) <= _PAIR
        and set(map(type, chain.from_iterable(regions))) <= _INT
    ):  # checked in C: no Python step per region
        return list(regions)
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
    if stages is UPSTREAM_FALLBACK_STAGES:
        return stages
    if isinstance(stages, str):
        raise TypeError("fallback_stages must be a collection of stage names, not a str")
    stages = frozenset(stages)
    unknown = stages - set(STAGES)
    if unknown:
        raise ValueError(f"unknown fallback stage(s) {sorted(unknown)}: stages are {', '.join(STAGES)}")
    return stages


def _check_choices(read_copy: str, failed_registration: str, create: object, retry: object) -> None:
    """TypeError/ValueError for a bad argument, before any work."""
    if read_copy not in READ_COPIES:
        raise ValueError(f"read_copy must be one of {', '.join(READ_COPIES)}, got {read_copy!r}")
    if failed_registration not in FAILED_REGISTRATIONS:
        raise ValueError(
            f"failed_registration must be one of {', '.join(FAILED_REGISTRATIONS)}, got {failed_registration!r}"
        )
    if not callable(create):
        raise TypeError(f"create must be callable, got {type(create).__name__}")
    if retry is not None and not isinstance(retry, RetryPolicy):
        raise TypeError(f"retry must be a RetryPolicy or None, got {type(retry).__name__}")


def load_context(
    path: str | os.PathLike,
    regions: Iterable,
    create: CreateFn,
    *,
    disable_file_mapped_weights: bool | str,
    faults: FaultPlan | None = None,
    fallback_to_heap: bool = True,
    fallback_stages: Iterable[str] = UPSTREAM_FALLBACK_STAGES,
    failed_registration: str = "stale",
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
    ``fallback_stages``: the stages whose failure falls back (upstream: register, create);
    ``failed_registration``: "stale" (upstream) or "undo" (PR #337's proposal).
    ``scope``: "session" (upstream), "process" (ours), or one `MappingScope` shared by loads
    that share EP contexts. ``sweep_deregistrations``: retry failed deregistrations at
    teardown (ours). ``read_copy``: "kept" or "transient" (upstream's direct-read copy).

    Raises FileCheckError for an unusable file (never a fallback), ContextLoadError when every
    allowed path failed (all stage errors kept), TypeError/ValueError for bad arguments (before
    any work)."""
    disabled = parse_disable_flag(disable_file_mapped_weights)
    _check_choices(read_copy, failed_registration, create, retry)
    requests = _requests(regions)
    stages = _fallback_stages(fallback_stages)
    backend = get_backend(dma_backend)
    sweep, scope = bool(sweep_deregistrations), resolve_scope(scope)
    shared = scope.cursors  # sessions sharing EP contexts: one backend manager counts the faults
    cursor = check_faults(faults) if shared is None else shared.setdefault(id(faults), check_faults(faults))
    path = path if type(path) is str else os.fspath(path)
    load = Load(path, requests, create, cursor, [], scope, sweep, read_copy, failed_registration)
    if disabled:
        return direct_attempt(load, "heap", "", [])
    context, stage, dma = mapped_attempt(load, default_mapper(mapper), retry or ONE_ATTEMPT, backend)
    if context is not None:
        return context
    failed = [dma] if dma is not None else []
    if not fallback_to_heap or stage not in stages:
        load.late.extend(load.late_at_teardown())  # no retry, no context: they arrive now
        load.release_late()
        load.release_held(into=load.scope.failed_mappings)  # unless the caller retries itself
        sweep_failed(load, failed)
        raise ContextLoadError(load.path, tuple(load.errors), stage)
    return direct_attempt(load, "fallback", stage, failed)
