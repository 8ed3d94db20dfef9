"""Error tree, file checks, file identity and region rules shared by every platform (OS errors become these here)."""

from __future__ import annotations

import operator
import os
import stat as stat_mod
import sys
from dataclasses import dataclass, field

IDENTITY_EDGE_BYTES = 4 * 1024  #: Bytes kept at each end for a file's identity (same-size rewrites in one mtime tick).

MAX_MAPPABLE = sys.maxsize  #: Largest size a mapping can have on this interpreter (upstream: "size fits in size_t").

U64_MAX = (1 << 64) - 1


class MapperError(Exception):
    """Base of every error raised by mapper_impl; each survives pickling (``__reduce__`` where ``__init__`` differs)."""


class FileCheckError(MapperError):
    """The file cannot be used at all (an input error: never retried, never a fallback)."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{reason}: {path}")
        self.path = path
        self.reason = reason

    def __reduce__(self) -> tuple:
        return type(self), (self.path, self.reason), self.__dict__


class FileMissingError(FileCheckError):
    """The path does not exist (or a symlink on it dangles or loops)."""


class NotARegularFileError(FileCheckError):
    """The path names a directory, a device, a FIFO..."""


class EmptyFileError(FileCheckError):
    """The file has zero bytes: there is nothing to map."""


class FileTooLargeError(FileCheckError):
    """The file does not fit in this process's address space (size_t)."""


class FileAccessError(FileCheckError):
    """The file exists but cannot be opened for reading (permissions, sharing)."""


class MappingError(MapperError):
    """The OS refused to map the file. Retried by the retry policy, then a heap fallback."""

    def __init__(self, message: str, *, os_error: int | None = None) -> None:
        super().__init__(message)
        self.os_error = os_error


class PlatformUnavailableError(MappingError):
    """File mapping is not available here at all: retrying cannot help."""


STATUS_ABORTED = "ABORTED"  #: QNN's status codes for a refused region request, kept on RegionError.
STATUS_INVALID_ARGUMENT = "INVALID_ARGUMENT"

#: Upstream's wording for a request refused because mapping was switched off for the context.
DISABLED_MESSAGE = (
    "Attempting to map DMA data but file mapping has been disabled, possibly due to an error in a previous request."
)


class RegionError(MapperError, ValueError):
    """A refused region request, by upstream's rules and order; ``status`` is the QNN status upstream returns."""

    def __init__(self, message: str, *, status: str = STATUS_INVALID_ARGUMENT) -> None:
        super().__init__(message)
        self.status = status


class FeatureDisabledError(RegionError):
    """Mapping was disabled for this load after an earlier error: upstream's ABORTED."""

    def __init__(self, message: str = DISABLED_MESSAGE) -> None:
        super().__init__(message, status=STATUS_ABORTED)


class RegistrationError(MapperError):
    """ "Failed to register DMA data mapping to RPCMEM": the attempt that asked for it fails."""


class DeregistrationError(MapperError):
    """ "Failed to deregister buffer from RPCMEM" (MEM_ALLOC): leaked (upstream) or kept for a sweep (opt-in)."""

    status = "MEM_ALLOC"


class ContextLoadError(MapperError):
    """Every allowed path of a load failed; ``errors`` keeps each stage's error in order."""

    def __init__(self, path: str, errors: tuple, failed_stage: str = "") -> None:
        text = "; ".join(str(e) for e in errors) or "no error recorded"
        super().__init__(f"cannot load {path}: {text}")
        self.path = path
        self.errors = tuple(errors)
        self.failed_stage = failed_stage  # the mapped attempt's failing stage ("" if disabled)

    def __reduce__(self) -> tuple:
        return type(self), (self.path, self.errors, self.failed_stage), self.__dict__


class StaleFileError(MapperError):
    """The file changed on disk (replaced, rewritten, truncated) since it was mapped."""


class ClosedError(MapperError, ValueError):
    """The object was used after close()."""


class HeapReadError(MapperError):
    """The heap read (the fallback path) failed too."""


def parse_disable_flag(value: object) -> bool:
    """ "0"/"1" or a bool for `disable_file_mapped_weights`; anything else is a ValueError, never a silent "off"."""
    if isinstance(value, bool):
        return value
    if value in ("0", "1"):
        return value == "1"
    raise ValueError(f'disable_file_mapped_weights must be "0", "1", True or False, got {value!r}')


def check_file(path: str) -> os.stat_result:
    """Upstream's checks before mapping (exists, regular, not empty, fits in size_t); returns the stat."""
    try:
        st = os.stat(path)
    except FileNotFoundError as err:
        raise FileMissingError(path, "no such file") from err
    except PermissionError as err:
        raise FileAccessError(path, "permission denied") from err
    except OSError as err:  # ELOOP, ENAMETOOLONG, ENOTDIR...
        raise FileMissingError(path, f"cannot stat ({err.strerror or err})") from err
    if not stat_mod.S_ISREG(st.st_mode):
        kind = "a directory" if stat_mod.S_ISDIR(st.st_mode) else "not a regular file"
        raise NotARegularFileError(path, kind)
    if st.st_size == 0:
        raise EmptyFileError(path, "file is empty")
    if st.st_size > MAX_MAPPABLE:
        raise FileTooLargeError(path, f"file of {st.st_size} bytes does not fit in size_t")
    return st


@dataclass(frozen=True)
class FileIdentity:
    """What makes "the same file": device, inode / file index, size, mtime and the file's edge bytes."""

    device: int
    inode: int
    size: int
    mtime_ns: int
    edges: bytes = field(repr=False)

    def describe_change(self, other: FileIdentity) -> str:
        """Name the first field that differs, for a useful stale-file message."""
        for name in ("device", "inode", "size", "mtime_ns"):
            if getattr(self, name) != getattr(other, name):
                return f"{name} changed ({getattr(self, name)} -> {getattr(other, name)})"
        if self.edges != other.edges:
            return "edges changed (the bytes at its start or end differ)"
        return "unchanged"


def file_edges(read_at, size: int, edge: int = IDENTITY_EDGE_BYTES) -> bytes:
    """The first and last ``edge`` bytes of a file via ``read_at(offset, n)``."""
    head = read_at(0, min(size, edge))
    if size <= edge:
        return head
    tail = max(edge, size - edge)
    return head + read_at(tail, size - tail)


_HAS_PREAD = hasattr(os, "pread")  # POSIX; Windows CPython seeks and reads


def identity_of_fd(fd: int, edge: int = IDENTITY_EDGE_BYTES) -> FileIdentity:
    """Identity of an open file (stat and read the opened file, not the path)."""
    st = os.fstat(fd)

    def read_at(offset: int, n: int) -> bytes:
        if _HAS_PREAD:
            return os.pread(fd, n, offset)
        os.lseek(fd, offset, os.SEEK_SET)
        return os.read(fd, n)

    return FileIdentity(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, file_edges(read_at, st.st_size, edge))


def identity_of_path(path: str, edge: int = IDENTITY_EDGE_BYTES) -> FileIdentity:
    """Identity of whatever the path names now."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_BINARY", 0))
    try:
        return identity_of_fd(fd, edge)
    finally:
        os.close(fd)


def as_index(value: object, name: str) -> int:
    """``value`` as an int via ``__index__``; a bool (numpy's too) or a float is a TypeError."""
    if type(value) is int:  # the common case, first: one check per offset of every region
        return value
    kind = type(value)
    if isinstance(value, bool) or (kind.__module__ == "numpy" and kind.__name__ in ("bool_", "bool")):
        raise TypeError(f"region {name} must be an integer, got bool")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"region {name} must be an integer, got {type(value).__name__}") from None


def validate_region(
    offset: object,
    size: object,
    file_size: int,
    *,
    feature_enabled: bool = True,
    base_is_null: bool = False,
    needs_backend_mapping: bool = True,
) -> tuple[int, int]:
    """Refuse a region request where and in the order upstream's DMA-data callback does; ``(offset, size)`` as ints."""
    if (
        type(offset) is int
        and type(size) is int
        and feature_enabled
        and needs_backend_mapping
        and not base_is_null
        and 0 <= offset
        and 0 < size <= file_size - offset
    ):
        return offset, size  # a valid request (every region of a load): none of the refusals below applies
    offset = as_index(offset, "offset")
    size = as_index(size, "size")
    if not feature_enabled:
        raise FeatureDisabledError()
    if base_is_null:
        raise RegionError("Attempting to map DMA data for null memory mapped base pointer")
    if size == 0:
        raise RegionError("Mapping request size must be > 0 with backend mapping required (region size is 0)")
    if not needs_backend_mapping:
        raise RegionError(
            "Mapping request size must be > 0 with backend mapping required (request does not need backend mapping)"
        )
    if offset < 0 or size < 0:
        raise RegionError(f"negative offset or size ({offset}, {size}): QNN's request fields are uint64")
    if offset > U64_MAX - size:
        raise RegionError(
            f"Critical error in QNN: mapping request offset + size will overflow 64 bits "
            f"(offset {offset} + size {size} overflows 64 bits)"
        )
    if offset + size > file_size:
        raise RegionError(
            f"Requested offset and size includes memory outside of mapped file: region "
            f"[{offset}, {offset + size}) runs past end of file ({file_size} bytes)"
        )
    return offset, size
