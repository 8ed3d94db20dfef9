"""One mapping per file per process, reference counted, never served stale; no table lock held during file I/O."""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass

from ._base import FileMapper, MappedFile
from ._common import MapperError
from ._faults import FaultCursor


def registry_key(path: str, mapper: FileMapper | None = None) -> tuple:
    """The file ``path`` names (device and inode, one ``stat``) per mapper instance; else its absolute spelling."""
    owner = id(mapper) if mapper is not None else 0
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return (owner, os.path.normcase(os.path.abspath(path)))
    return (owner, st.st_dev, st.st_ino)


@dataclass
class _Entry:
    key: tuple  # the key it was registered under: the path may name another file by release
    mapped: MappedFile
    refs: int


@dataclass
class _KeyLock:
    lock: threading.Lock
    waiters: int  # threads holding or waiting for it: dropped from the table at 0


class MappingRegistry:
    """Thread-safe path -> mapping table with reference counts and per-key I/O locks."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_key: dict[tuple, _Entry] = {}
        self._by_id: dict[int, _Entry] = {}
        self._key_locks: dict[tuple, _KeyLock] = {}

    def reset_locks(self) -> None:
        """In a forked child: a new table lock and no per-key locks."""
        self._lock = threading.Lock()
        self._key_locks = {}

    def _enter_key(self, key: tuple) -> _KeyLock:
        with self._lock:
            key_lock = self._key_locks.get(key)
            if key_lock is None:
                key_lock = self._key_locks[key] = _KeyLock(threading.Lock(), 0)
            key_lock.waiters += 1
        key_lock.lock.acquire()
        return key_lock

    def _exit_key(self, key: tuple, key_lock: _KeyLock) -> None:
        key_lock.lock.release()
        with self._lock:
            key_lock.waiters -= 1
            if key_lock.waiters == 0 and self._key_locks.get(key) is key_lock:
                del self._key_locks[key]

    def acquire(self, path: str, mapper: FileMapper, faults: FaultCursor | None = None) -> MappedFile:
        """The live mapping of ``path`` (refs + 1), or a new one if none or the file changed."""
        key = registry_key(path, mapper)
        key_lock = self._enter_key(key)
        try:
            with self._lock:
                entry = self._by_key.get(key)
            if entry is not None:
                same = self._still_same_file(entry, path, mapper)  # file I/O: table unlocked
                with self._lock:
                    if self._by_key.get(key) is entry and entry.refs > 0:
                        if same:
                            entry.refs += 1
                            return entry.mapped
                        del self._by_key[key]  # stale: keep it for its users, stop serving it
            mapped = mapper.map_file(path, faults)  # file I/O: only this key waits
            entry = _Entry(key, mapped, refs=1)
            with self._lock:
                self._by_key[key] = entry
                self._by_id[id(mapped)] = entry
            return mapped
        finally:
            self._exit_key(key, key_lock)

    @staticmethod
    def _still_same_file(entry: _Entry, path: str, mapper: FileMapper) -> bool:
        try:
            return mapper.identity_of_path(path) == entry.mapped.identity
        except (OSError, MapperError):
            return False  # removed or unreadable now: let map_file report it

    def release(self, mapped: MappedFile) -> bool:
        """refs - 1, unmapping when the last user leaves (outside the table lock); True if unmapped now."""
        with self._lock:
            entry = self._by_id.get(id(mapped))
            if entry is None or entry.mapped is not mapped:
                entry = None
            else:
                entry.refs -= 1
                if entry.refs > 0:
                    return False
                del self._by_id[id(mapped)]
                # Not registry_key(mapped.path): the path may resolve elsewhere now; drop only the entry served.
                if self._by_key.get(entry.key) is entry:
                    del self._by_key[entry.key]
        return mapped.close()

    def users(self, path: str, mapper: FileMapper) -> int:
        """How many loads share ``mapper``'s current mapping of ``path`` (0 if none)."""
        with self._lock:
            entry = self._by_key.get(registry_key(path, mapper))
            return entry.refs if entry else 0


REGISTRY = MappingRegistry()
