"""`load_context_list`: the shared-resource path; any failure retries the whole list once from direct reads."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from ._common import ContextLoadError, parse_disable_flag
from ._context import CreateFn, LoadedContext, StageError, load_context
from ._faults import FaultPlan
from ._scope import MappingScope, resolve_scope

#: 2.7.0's words for the list path's one retry (its literal parts are strings of the DLL).
RETRY_MESSAGE = (
    "Failed to create context with file mapping enabled. Error: {}, Code: {}. Retrying with feature disabled."
)


@dataclass
class LoadedContextList:
    """The contexts of one list, in item order, and how the list was made."""

    contexts: list[LoadedContext]
    path_taken: str  # "mapped", "heap" (disabled) or "fallback" (the retry with the feature off)
    fallback_stage: str = ""  # the mapped attempt's failing stage
    errors: list[StageError] = field(default_factory=list)
    retry_message: str = ""  # the EP's retry line, "" when there was no retry

    @property
    def values(self) -> list:
        return [c.value for c in self.contexts]

    def close(self) -> None:
        for ctx in self.contexts:
            ctx.close()

    def __enter__(self) -> LoadedContextList:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _items(items: Iterable) -> list[tuple[str, list]]:
    out = []
    for i, item in enumerate(items):
        try:
            path, regions = item
        except (TypeError, ValueError):
            raise TypeError(f"items[{i}] must be a (path, regions) pair, got {item!r}") from None
        out.append((os.fspath(path), list(regions)))
    if not out:
        raise ValueError("a context list needs at least one (path, regions) item")
    return out


def load_context_list(
    items: Sequence,
    create: CreateFn,
    *,
    disable_file_mapped_weights: bool | str,
    faults: FaultPlan | None = None,
    scope: str | MappingScope | None = "session",
    **options,
) -> LoadedContextList:
    """Create every ``(path, regions)`` item's context: all mapped, or after any failure all from direct reads."""
    todo = _items(items)
    shared = resolve_scope(scope)  # one backend manager for the whole list
    if parse_disable_flag(disable_file_mapped_weights):
        contexts = _direct(todo, create, faults, shared, options)
        return LoadedContextList(contexts, "heap")
    attempt = MappingScope(shared.kind, shared.registry)  # the list's one table, which keeps
    attempt.failed_mappings = []  # the failed item's mapping, still mapped, for the retry
    made: list[LoadedContext] = []
    try:
        for path, regions in todo:
            made.append(
                load_context(
                    path,
                    regions,
                    create,
                    disable_file_mapped_weights=disable_file_mapped_weights,
                    faults=faults,
                    fallback_to_heap=False,
                    scope=attempt,
                    **options,
                )
            )
    except ContextLoadError as err:
        return _retry(todo, create, faults, shared, options, err, made, attempt.failed_mappings)
    except BaseException:  # an input error or an interrupt: no retry, nothing left behind
        _release(made, attempt.failed_mappings)
        raise
    return LoadedContextList(made, "mapped", "", [e for ctx in made for e in ctx.errors])


def _release(made: list[LoadedContext], held: list) -> None:
    """Close the mapped attempt's contexts and its failed item's mapping."""
    for ctx in made:
        ctx.close()
    for weights in held:
        weights.close()


def _retry(
    todo: list[tuple[str, list]],
    create: CreateFn,
    faults: FaultPlan | None,
    scope: MappingScope,
    options: dict,
    err: ContextLoadError,
    made: list[LoadedContext],
    held: list,
) -> LoadedContextList:
    """The one retry with the feature disabled; the mapped attempt's mappings are released once it is over."""
    for ctx in made:
        ctx.release_registrations()
    again = None
    try:
        contexts = _direct(todo, create, faults, scope, options)
    except ContextLoadError as failed:
        again = failed
    finally:
        _release(made, held)
    errors = list(err.errors) + [e for ctx in made for e in ctx.errors]
    if again is not None:
        raise ContextLoadError(again.path, tuple(errors) + again.errors, err.failed_stage) from again
    for ctx in contexts:
        ctx.path_taken, ctx.fallback_stage = "fallback", err.failed_stage
    message = RETRY_MESSAGE.format(err, "QNN_COMMON_ERROR_SYSTEM")
    return LoadedContextList(contexts, "fallback", err.failed_stage, errors, message)


def _direct(todo, create, faults, scope, options) -> list[LoadedContext]:
    """Every item from a direct read (the retry "with feature disabled")."""
    contexts: list[LoadedContext] = []
    try:
        for path, regions in todo:
            contexts.append(
                load_context(
                    path, regions, create, disable_file_mapped_weights="1", faults=faults, scope=scope, **options
                )
            )
    except BaseException:
        for ctx in contexts:
            ctx.close()
        raise
    return contexts
