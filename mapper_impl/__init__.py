"""mapper_impl: the QNN EP "file mapped weights" behaviour, portable, in Python.

Public API (the harness, the suites and users import exactly these names):
``create_mapper``, ``load_weights``, ``Weights``, ``FaultPlan``, ``RetryPolicy``, ``stats``,
``MapperStats`` and the error tree (``MapperError`` and its subclasses).

The platform module is picked once, at import: `WindowsFileMapper` (ctypes over kernel32) on
Windows, `PosixFileMapper` (mmap) everywhere else.
"""

from __future__ import annotations

import os

from ._base import FileMapper, MappedFile
from ._common import (
    ClosedError,
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
    StaleFileError,
    align_down,
    parse_disable_flag,
    validate_region,
)
from ._faults import FaultPlan
from ._posix import PosixFileMapper
from ._registry import REGISTRY
from ._stats import MapperStats, stats
from ._weights import PATHS_TAKEN, RetryPolicy, Weights, load_weights

if os.name == "nt":
    from ._windows import WindowsFileMapper

    _PlatformMapper: type[FileMapper] = WindowsFileMapper
else:
    _PlatformMapper = PosixFileMapper

_default_mapper: FileMapper | None = None


def create_mapper() -> FileMapper:
    """The platform's mapper (one shared instance: mappers hold no per-call state)."""
    global _default_mapper
    if _default_mapper is None:
        _default_mapper = _PlatformMapper()
    return _default_mapper


def shared_users(path: str, mapper: FileMapper | None = None) -> int:
    """How many live loads share the current mapping of ``path`` in this process."""
    return REGISTRY.users(path, mapper or create_mapper())


__all__ = [
    "PATHS_TAKEN",
    "ClosedError",
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
    "MappedFile",
    "MapperError",
    "MapperStats",
    "MappingError",
    "NotARegularFileError",
    "PlatformUnavailableError",
    "PosixFileMapper",
    "RegionError",
    "RetryPolicy",
    "StaleFileError",
    "Weights",
    "align_down",
    "create_mapper",
    "load_weights",
    "parse_disable_flag",
    "shared_users",
    "stats",
    "validate_region",
]
