"""One mapping per file per process, reference counted, never served stale.

Upstream keeps a map from context-bin path to mapping behind a mutex; so do we, keyed by the
resolved path, and we also compare the file's identity on every acquire: a file replaced or
rewritten on disk gets a fresh mapping, while users of the old one keep theirs until they
release it.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass

from ._base import FileMapper, MappedFile
from ._common import MapperError
from ._faults import FaultCursor


def registry_key(path: str, mapper: FileMapper | None = None) -> str:
    """Resolved, case-normalised path (two spellings of one file share one mapping), per
    mapper instance (a mapping made through one API is never served to another)."""
    return f"{id(mapper) if mapper is not None else 0}:{os.path.normcase(os.path.realpath(path))}"


@dataclass
class _Entry:
    key: str  # the key it was registered under: the path may resolve elsewhere by release
    mapped: MappedFile
    refs: int


class MappingRegistry:
    """Thread-safe path -> mapping table with reference counts."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_key: dict[str, _Entry] = {}
        self._by_id: dict[int, _Entry] = {}

    def acquire(
        self, path: str, mapper: FileMapper, faults: FaultCursor | None = None
    ) -> MappedFile:
        """The live mapping of ``path`` (refs + 1), or a new one if none or the file changed."""
        key = registry_key(path, mapper)
        with self._lock:
            entry = self._by_key.get(key)
            if entry is not None and self._still_same_file(entry, path, mapper):
                entry.refs += 1
                return entry.mapped
            if entry is not None:  # stale: keep it for its users, stop serving it
                del self._by_key[key]
            mapped = mapper.map_file(path, faults)
            entry = _Entry(key, mapped, refs=1)
            self._by_key[key] = entry
            self._by_id[id(mapped)] = entry
            return mapped

    @staticmethod
    def _still_same_file(entry: _Entry, path: str, mapper: FileMapper) -> bool:
        try:
            return mapper.identity_of_path(path) == entry.mapped.identity
        except (OSError, MapperError):
            return False  # removed or unreadable now: let map_file report it

    def release(self, mapped: MappedFile) -> bool:
        """refs - 1; closes the mapping when the last user leaves. True if it is unmapped now
        (False while a live view defers the unmap, or while other users hold it)."""
        with self._lock:
            entry = self._by_id.get(id(mapped))
            if entry is None or entry.mapped is not mapped:
                return mapped.close()
            entry.refs -= 1
            if entry.refs > 0:
                return False
            del self._by_id[id(mapped)]
            # Not registry_key(mapped.path): a symlink retargeted or a relative path after a
            # chdir resolves elsewhere now. Drop the entry only if it is still the one served.
            if self._by_key.get(entry.key) is entry:
                del self._by_key[entry.key]
        return mapped.close()

    def users(self, path: str, mapper: FileMapper) -> int:
        """How many loads share ``mapper``'s current mapping of ``path`` (0 if none)."""
        with self._lock:
            entry = self._by_key.get(registry_key(path, mapper))
            return entry.refs if entry else 0


REGISTRY = MappingRegistry()
