"""mapper_impl: the QNN EP "file mapped weights" behaviour, portable, in Python (docs/mapper.md)."""

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
    """How many live loads share the process-scope mapping of ``path`` (a session-scope load has its own)."""
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
