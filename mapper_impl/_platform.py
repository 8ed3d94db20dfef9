"""The platform's mapper, picked once at import (a module of its own: no import circle with ``__init__``)."""

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
