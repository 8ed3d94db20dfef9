"""mapper_impl: the QNN EP "file mapped weights" behaviour, portable, in Python.

Public API (the harness, the suites and users import exactly these names):

- ``load_context`` -> ``LoadedContext``: the EP's pipeline for one context (map, register each
  region for DMA, create; one direct-read fallback), with ``STAGES``,
  ``UPSTREAM_FALLBACK_STAGES`` (the default: a failed mapping step is fatal),
  ``FAILED_REGISTRATIONS`` ("stale": upstream; "undo"), ``READ_COPIES`` and ``StageError``;
- ``load_context_list`` -> ``LoadedContextList``: the shared-resource (list) path, where any
  failure, the mapping's included, retries the whole list with the feature disabled;
- ``MappingScope``/``SCOPES``: who shares a mapping (one per session by default, as upstream's
  per-backend-manager file mapper; ``"process"`` is an opt-in extension);
- ``load_weights`` -> ``Weights``: the lower level (map or read), ``RetryPolicy`` (opt-in);
- ``FaultPlan``; ``stats``/``MapperStats``; ``sweep_registrations``; ``create_mapper``,
  ``shared_users``, ``FileMapper``, ``MappedFile``, ``PosixFileMapper``; ``DmaBackend``;
- the error tree (``MapperError`` and its subclasses), ``parse_disable_flag``,
  ``validate_region``, ``FileIdentity``.

The platform module is picked once, at import: `WindowsFileMapper` (ctypes over kernel32) on
Windows, `PosixFileMapper` (mmap) everywhere else.
"""

from __future__ import annotations

from ._base import FileMapper, MappedFile
from ._common import (
    ClosedError,
    ContextLoadError,
    DeregistrationError,
    EmptyFileError,
    FeatureDisabledError,
    FileAccessError,
    FileCheckError,
    FileIdentity,
    FileMissingError,
    FileTooLargeError,
    HeapReadError,
    MapperError,
    MappingError,
    NotARegularFileError,
    PlatformUnavailableError,
    RegionError,
    RegistrationError,
    StaleFileError,
    parse_disable_flag,
    validate_region,
)
from ._context import (
    FAILED_REGISTRATIONS,
    READ_COPIES,
    STAGES,
    UPSTREAM_FALLBACK_STAGES,
    LoadedContext,
    StageError,
    load_context,
)
from ._dma import DmaBackend, sweep_registrations
from ._faults import FaultPlan
from ._list import LoadedContextList, load_context_list
from ._platform import create_mapper
from ._posix import PosixFileMapper
from ._registry import REGISTRY as _REGISTRY
from ._scope import SCOPES, MappingScope
from ._stats import MapperStats, stats
from ._weights import PATHS_TAKEN, RetryPolicy, Weights, load_weights


def shared_users(path: str, mapper: FileMapper | None = None) -> int:
    """How many live loads share the process-scope mapping of ``path`` (`load_weights` and
    ``scope="process"`` loads; a session-scope load has a mapping of its own)."""
    return _REGISTRY.users(path, mapper or create_mapper())


__all__ = [
    "FAILED_REGISTRATIONS",
    "PATHS_TAKEN",
    "READ_COPIES",
    "SCOPES",
    "STAGES",
    "UPSTREAM_FALLBACK_STAGES",
    "ClosedError",
    "ContextLoadError",
    "DeregistrationError",
    "DmaBackend",
    "EmptyFileError",
    "FaultPlan",
    "FeatureDisabledError",
    "FileAccessError",
    "FileCheckError",
    "FileIdentity",
    "FileMapper",
    "FileMissingError",
    "FileTooLargeError",
    "HeapReadError",
    "LoadedContext",
    "LoadedContextList",
    "MappedFile",
    "MapperError",
    "MapperStats",
    "MappingError",
    "MappingScope",
    "NotARegularFileError",
    "PlatformUnavailableError",
    "PosixFileMapper",
    "RegionError",
    "RegistrationError",
    "RetryPolicy",
    "StageError",
    "StaleFileError",
    "Weights",
    "create_mapper",
    "load_context",
    "load_context_list",
    "load_weights",
    "parse_disable_flag",
    "shared_users",
    "stats",
    "sweep_registrations",
    "validate_region",
]
