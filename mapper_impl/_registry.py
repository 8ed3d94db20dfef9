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
from ._common import identity_of_path
from ._faults import FaultCursor


def registry_key(path: str) -> str:
    """Resolved, case-normalised path: two spellings of one file share one mapping."""
    return os.path.normcase(os.path.realpath(path))


@dataclass
class _Entry:
    mapped: MappedFile
    refs: int
    current: bool = True


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
        key = registry_key(path)
        with self._lock:
            entry = self._by_key.get(key)
            if entry is not None and self._still_same_file(entry, path):
                entry.refs += 1
                return entry.mapped
            if entry is not None:  # stale: keep it for its users, stop serving it
                entry.current = False
                del self._by_key[key]
            mapped = mapper.map_file(path, faults)
            entry = _Entry(mapped, refs=1)
            self._by_key[key] = entry
            self._by_id[id(mapped)] = entry
            return mapped

    @staticmethod
    def _still_same_file(entry: _Entry, path: str) -> bool:
        try:
            return identity_of_path(path) == entry.mapped.identity
        except OSError:
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
            if entry.current:
                del self._by_key[registry_key(mapped.path)]
        return mapped.close()

    def users(self, path: str) -> int:
        """How many loads share the current mapping of ``path`` (0 if none)."""
        with self._lock:
            entry = self._by_key.get(registry_key(path))
            return entry.refs if entry else 0


REGISTRY = MappingRegistry()
