"""The platform's mapper, picked once at import: ``WindowsFileMapper`` (ctypes over kernel32) on
Windows, ``PosixFileMapper`` elsewhere.

A module of its own so that the loaders (`_weights`) reach the default mapper without importing
the package's ``__init__`` back (which imports them): no import circle.
"""

from __future__ import annotations

import os

from ._base import FileMapper
from ._posix import PosixFileMapper

if os.name == "nt":
    from ._windows import WindowsFileMapper as _WindowsFileMapper

    _PlatformMapper: type[FileMapper] = _WindowsFileMapper
else:
    _PlatformMapper = PosixFileMapper

_default_mapper: FileMapper | None = None


def create_mapper() -> FileMapper:
    """The platform's mapper (one shared instance: mappers hold no per-call state)."""
    global _default_mapper
    if _default_mapper is None:
        _default_mapper = _PlatformMapper()
    return _default_mapper
