"""The file-mapping interface: one read-only whole-file view per file; regions are ``base + offset`` slices."""

from __future__ import annotations

import threading
import weakref
from abc import ABC, abstractmethod

from ._common import ClosedError, FileIdentity, MapperError, StaleFileError, identity_of_path, validate_region
from ._faults import FaultCursor
from ._stats import COUNTERS


class FileMapper(ABC):
    """One implementation per OS: `PosixFileMapper`, `WindowsFileMapper`."""

    allocation_granularity: int  #: The OS's mapping granularity (64 KiB on Windows, the page size on POSIX).
    name: str

    def identity_of_path(self, path: str) -> FileIdentity:
        """Identity of what ``path`` names now, read through the same API as a mapping's."""
        return identity_of_path(path)

    @abstractmethod
    def map_file(self, path: str, faults: FaultCursor | None = None) -> MappedFile:
        """Open ``path`` read-only and map all of it; MappingError or a FileCheckError."""


class MappedFile(ABC):
    """One OS view of one whole file, shared by every load of that file in the process."""

    def __init__(self, path: str, identity: FileIdentity) -> None:
        self.path = path
        self.size = identity.size
        self.identity = identity
        self._lock = threading.Lock()
        self._closed = False
        owner, self.base_address = self._map_whole_file()
        self._owner_ref = weakref.ref(owner)
        self._buffer: memoryview | None = memoryview(owner).cast("B").toreadonly()
        self._track_view(owner)

    @abstractmethod
    def _map_whole_file(self) -> tuple[object, int]:
        """Map the whole file read-only: (a buffer exporter that unmaps when collected, base address)."""

    @abstractmethod
    def _track_view(self, owner: object) -> None:
        """Register the whole-file view in the stats (the platform knows how it is released)."""

    @abstractmethod
    def current_identity(self) -> FileIdentity:
        """Identity of the mapped file, read now (detects truncation and rewrites)."""

    @abstractmethod
    def _release_handles(self) -> None:
        """Drop this object's own OS handles, if it kept any (the view keeps what it needs)."""

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def buffer(self) -> memoryview:
        """Read-only view of the whole file."""
        buffer = self._buffer
        if buffer is None:
            raise ClosedError(f"mapping of {self.path} is closed")
        return buffer

    def region(self, offset: object, size: object, *, feature_enabled: bool = True) -> memoryview:
        """``base + offset``: a read-only slice of the whole-file view, refused by upstream's rules."""
        if self._closed:
            raise ClosedError(f"mapping of {self.path} is closed")
        offset, size = validate_region(offset, size, self.size, feature_enabled=feature_enabled)
        with self._lock:  # sliced before a concurrent close() can release the buffer
            buffer = self._buffer
            if buffer is None:
                raise ClosedError(f"mapping of {self.path} is closed")
            return buffer[offset : offset + size]

    def verify(self) -> None:
        """StaleFileError if the file changed since it was mapped (a truncated POSIX mapping is a SIGBUS)."""
        try:
            now = self.current_identity()
        except (OSError, MapperError) as err:
            if isinstance(err, ClosedError):
                raise
            raise StaleFileError(f"{self.path}: cannot read its identity now ({err})") from err
        if now != self.identity:
            change = self.identity.describe_change(now)
            raise StaleFileError(f"{self.path}: {change} since it was mapped")

    def close(self) -> bool:
        """Release the mapping: True if unmapped now, False if something still pins the view."""
        with self._lock:
            if self._closed:
                return True
            self._closed = True
            buffer, self._buffer = self._buffer, None
        try:
            buffer.release()
        except BufferError:
            pass  # someone exported our memoryview directly; the view's owner defers the unmap
        del buffer
        self._release_handles()
        owner = self._owner_ref()
        if owner is None:
            return True
        COUNTERS.add(deferred_unmaps=1)
        weakref.finalize(owner, COUNTERS.add, deferred_unmaps=-1)
        return False

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<{type(self).__name__} {self.path!r} size={self.size} {state}>"
