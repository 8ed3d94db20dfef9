"""`load_context`: the QNN EP's single-context pipeline; a failed mapping step is fatal (cc7ec9e 1416-1422)."""

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

STAGES = ("map", "register", "create")  #: The mapped attempt's stages, in order; ``fallback_stage`` is one of them.
#: Upstream's single-context path: a failed mapping step does not fall back; ``STAGES`` is the opt-in.
UPSTREAM_FALLBACK_STAGES = frozenset({"register", "create"})
ONE_ATTEMPT = RetryPolicy()  #: Upstream's policy (one mapping attempt), made once rather than per load.
#: ``read_copy``: how long the direct read's copy lives ("transient": upstream's local, freed once the context exists).
READ_COPIES = ("kept", "transient")


_TUPLE, _PAIR, _INT = {tuple}, {2}, {int}


def _requests(regions: Iterable) -> list[tuple[int, int]]:
    """(offset, size) pairs as ints, type-checked before any work (a list of int pairs in one pass)."""
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
    """Create one context over ``path`` the way the QNN EP does (docs/mapper.md describes the options)."""
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
