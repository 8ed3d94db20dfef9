"""The file-mapping interface every platform implements, and the logic they share.

A platform supplies three primitives (open the file, map a read-only view at an aligned
offset, read the current identity); `MappedFile` turns them into the upstream behaviour:
one read-only view of the whole file, region views aligned down to the allocation
granularity, region validation, and close() that never unmaps memory a caller still sees.

Lifetime rule (why close() cannot segfault): the object that owns an OS view unmaps it when
it is garbage collected. close() only drops mapper_impl's own references; if a numpy array
or memoryview still pins the whole-file view or a region view, that view's unmap is deferred
until the last user goes, and `stats().deferred_unmaps` counts it (one per deferred OS view).
"""

from __future__ import annotations

import threading
import weakref
from abc import ABC, abstractmethod

from ._common import (
    ClosedError,
    FileIdentity,
    MappingError,
    StaleFileError,
    align_down,
    identity_of_path,
    validate_region,
)
from ._faults import FaultCursor
from ._stats import COUNTERS


class FileMapper(ABC):
    """One implementation per OS: `PosixFileMapper`, `WindowsFileMapper`."""

    #: Views must start on a multiple of this (64 KiB on Windows, the page size on POSIX).
    allocation_granularity: int
    name: str

    def identity_of_path(self, path: str) -> FileIdentity:
        """Identity of what ``path`` names now, read the way this mapper reads it for a
        mapping (the registry compares the two, so both must come from the same API)."""
        return identity_of_path(path)

    @abstractmethod
    def map_file(self, path: str, faults: FaultCursor | None = None) -> MappedFile:
        """Open ``path`` read-only and map all of it read-only. Raises MappingError (retryable)
        or a FileCheckError (input error)."""


class MappedFile(ABC):
    """One OS mapping of one whole file, shared by every user of that file in the process."""

    def __init__(self, path: str, size: int, identity: FileIdentity, granularity: int) -> None:
        self.path = path
        self.size = size
        self.identity = identity
        self.granularity = granularity
        self.feature_enabled = True
        self._lock = threading.Lock()
        self._closed = False
        # weak refs to region views (owners need not be hashable, so no WeakSet), pruned as
        # the list grows: close() counts the live ones as deferred unmaps
        self._region_refs: list[weakref.ref] = []
        self._prune_at = 64
        owner = self._map_view(0, size)
        self._owner_ref = weakref.ref(owner)
        self._buffer: memoryview | None = memoryview(owner).cast("B").toreadonly()
        self._track_whole_view(owner)

    # -- platform primitives ------------------------------------------------------------
    @abstractmethod
    def _map_view(self, aligned_offset: int, length: int) -> object:
        """Map ``length`` bytes from ``aligned_offset``; return an object exporting the
        buffer that unmaps the view when it is garbage collected. Raises MappingError."""

    @abstractmethod
    def _track_whole_view(self, owner: object) -> None:
        """Register the whole-file view in the stats (platform knows how it is released)."""

    @abstractmethod
    def _track_region_view(self, owner: object, length: int) -> None:
        """Register a region view in the stats."""

    @abstractmethod
    def current_identity(self) -> FileIdentity:
        """Identity of the file this mapping holds open, read now (detects truncation)."""

    @abstractmethod
    def _release_handles(self) -> None:
        """Drop this object's own OS handles (views keep what they need alive)."""

    # -- shared behaviour ---------------------------------------------------------------
    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def buffer(self) -> memoryview:
        """Read-only view of the whole file."""
        if self._buffer is None:
            raise ClosedError(f"mapping of {self.path} is closed")
        return self._buffer

    def disable(self) -> None:
        """Refuse further region requests (upstream: feature disabled after an error)."""
        self.feature_enabled = False

    def region(self, offset: int, size: int, faults: FaultCursor | None = None) -> memoryview:
        """A read-only view of ``[offset, offset+size)`` from a view mapped at the aligned
        offset below it (base + delta), refused by upstream's rules."""
        if self._closed:
            raise ClosedError(f"mapping of {self.path} is closed")
        validate_region(offset, size, self.size, feature_enabled=self.feature_enabled)
        aligned = align_down(offset, self.granularity)
        delta = offset - aligned
        if faults is not None:
            try:
                faults.before_region()
            except OSError as err:
                raise MappingError(
                    f"cannot map region of {self.path}: {err}", os_error=err.errno
                ) from err
        owner = self._map_view(aligned, delta + size)
        self._track_region_view(owner, delta + size)
        with self._lock:
            if len(self._region_refs) >= self._prune_at:
                self._region_refs = [r for r in self._region_refs if r() is not None]
                self._prune_at = max(64, 2 * len(self._region_refs))
            self._region_refs.append(weakref.ref(owner))
        return memoryview(owner).cast("B").toreadonly()[delta : delta + size]

    def verify(self) -> None:
        """Raise StaleFileError if the file was truncated or rewritten since it was mapped.

        Call it before touching pages after anything could have changed the file: on POSIX a
        truncated mapping raises SIGBUS on access, which no Python code can catch."""
        now = self.current_identity()
        if now != self.identity:
            change = self.identity.describe_change(now)
            raise StaleFileError(f"{self.path}: {change} since it was mapped")

    def close(self) -> bool:
        """Release the mapping. True if it was unmapped now, False if a live view (of the whole
        file or of a region) defers it."""
        with self._lock:
            if self._closed:
                return True
            self._closed = True
            buffer, self._buffer = self._buffer, None
            region_owners = [r() for r in self._region_refs]
            self._region_refs = []
        try:
            buffer.release()
        except BufferError:
            pass  # someone exported our memoryview directly; the view's owner defers the unmap
        del buffer
        self._release_handles()
        owners = [o for o in (self._owner_ref(), *region_owners) if o is not None]
        for owner in owners:
            COUNTERS.add(deferred_unmaps=1)
            weakref.finalize(owner, COUNTERS.add, deferred_unmaps=-1)
        return not owners

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<{type(self).__name__} {self.path!r} size={self.size} {state}>"
