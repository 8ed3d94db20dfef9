"""POSIX (Linux, Android, macOS) file mapper over ``mmap``: the port upstream lists as future work.

Each view is a ``mmap.mmap`` object: it unmaps itself when garbage collected, which is what
makes deferred unmapping safe. OS errors become domain errors here and nowhere else.

What cannot be prevented on POSIX: another process truncating the file while it is mapped.
Touching a page past the new end raises SIGBUS, which kills the process before any Python
handler runs. Mitigations: `MappedFile.verify()` checks the open file's identity before use,
the registry never serves a mapping whose file changed, and the harness runs every session
in a worker process so a SIGBUS is recorded as that worker's failure, not a harness crash.
"""

from __future__ import annotations

import errno
import mmap
import os

from ._base import FileMapper, MappedFile
from ._common import (
    ClosedError,
    FileAccessError,
    FileIdentity,
    MappingError,
    PlatformUnavailableError,
    check_file,
    identity_of_fd,
)
from ._faults import FaultCursor
from ._stats import track


def _open_readonly(path: str) -> int:
    flags = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    try:
        return os.open(path, flags)
    except PermissionError as err:
        raise FileAccessError(path, "permission denied") from err
    except OSError as err:
        raise FileAccessError(path, f"cannot open ({err.strerror or err})") from err


class PosixMappedFile(MappedFile):
    """A read-only ``MAP_SHARED`` mapping of a whole file; the fd stays open while mapped."""

    def __init__(self, path: str, fd: int, identity: FileIdentity, granularity: int) -> None:
        self._fd: int | None = fd
        super().__init__(path, identity.size, identity, granularity)

    def _map_view(self, aligned_offset: int, length: int) -> mmap.mmap:
        if self._fd is None:
            raise MappingError(f"cannot map {self.path}: file is closed")
        try:
            return mmap.mmap(self._fd, length, access=mmap.ACCESS_READ, offset=aligned_offset)
        except (OSError, ValueError, OverflowError) as err:
            code = getattr(err, "errno", None)
            raise MappingError(f"mmap of {self.path} failed: {err}", os_error=code) from err

    def _track_whole_view(self, owner: object) -> None:
        track(owner, "live_mappings", "mapped_bytes", self.size)

    def _track_region_view(self, owner: object, length: int) -> None:
        track(owner, "live_views", "view_bytes", length)

    def current_identity(self) -> FileIdentity:
        if self._fd is None:
            raise ClosedError(f"mapping of {self.path} is closed")
        return identity_of_fd(self._fd)

    def _release_handles(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


class PosixFileMapper(FileMapper):
    """``mmap`` with ``PROT_READ``/``MAP_SHARED``: pages come from the page cache, shared by
    every process that maps the same file."""

    name = "posix-mmap"
    allocation_granularity = mmap.ALLOCATIONGRANULARITY

    def map_file(self, path: str, faults: FaultCursor | None = None) -> PosixMappedFile:
        if faults is not None and faults.platform_unavailable:
            raise PlatformUnavailableError("file mapping unavailable on this platform (injected)")
        check_file(path)
        fd = _open_readonly(path)
        try:
            if faults is not None:
                faults.before_map()
            identity = identity_of_fd(fd)
            if identity.size == 0:  # emptied between check and open
                raise OSError(errno.EINVAL, "file became empty")
            return PosixMappedFile(path, fd, identity, self.allocation_granularity)
        except OSError as err:
            os.close(fd)
            raise MappingError(f"cannot map {path}: {err}", os_error=err.errno) from err
        except BaseException:
            os.close(fd)
            raise
