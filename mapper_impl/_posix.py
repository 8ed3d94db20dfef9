"""POSIX file mapper over ``mmap`` (upstream's future work); a truncated file is SIGBUS, hence `verify()`."""

from __future__ import annotations

import ctypes
import errno
import functools
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

#: Read-only, not inherited by children, binary (Windows CPython's os.open): once, not per map.
_READ_FLAGS = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)


def _open_readonly(path: str) -> int:
    try:
        return os.open(path, _READ_FLAGS)
    except PermissionError as err:
        raise FileAccessError(path, "permission denied") from err
    except OSError as err:
        raise FileAccessError(path, f"cannot open ({err.strerror or err})") from err


class _PyBuffer(ctypes.Structure):
    """CPython's ``Py_buffer`` (stable layout since 3.3)."""

    _fields_ = [
        ("buf", ctypes.c_void_p),
        ("obj", ctypes.py_object),
        ("len", ctypes.c_ssize_t),
        ("itemsize", ctypes.c_ssize_t),
        ("readonly", ctypes.c_int),
        ("ndim", ctypes.c_int),
        ("format", ctypes.c_char_p),
        ("shape", ctypes.c_void_p),
        ("strides", ctypes.c_void_p),
        ("suboffsets", ctypes.c_void_p),
        ("internal", ctypes.c_void_p),
    ]


@functools.lru_cache(maxsize=1)
def _buffer_api() -> tuple:
    """PyObject_GetBuffer / PyBuffer_Release declared on a private handle of the interpreter's library."""
    api = ctypes.PyDLL(ctypes.pythonapi._name, handle=ctypes.pythonapi._handle)
    get, release = api.PyObject_GetBuffer, api.PyBuffer_Release
    get.argtypes, get.restype = (ctypes.py_object, ctypes.POINTER(_PyBuffer), ctypes.c_int), ctypes.c_int
    release.argtypes, release.restype = (ctypes.POINTER(_PyBuffer),), None
    return get, release


_buffer_api()  # declared with the module (the library's binding), not during a mapping: 0.1 ms


def buffer_address(obj: object) -> int:
    """Address of the first byte of any buffer exporter (a read-only mmap included)."""
    get, release = _buffer_api()
    view = _PyBuffer()
    get(obj, ctypes.byref(view), 0)  # PyBUF_SIMPLE; a failure raises BufferError (PyDLL)
    try:
        return view.buf or 0
    finally:
        release(ctypes.byref(view))


class PosixMappedFile(MappedFile):
    """A read-only ``MAP_SHARED`` mapping of a whole file; keeps its fd so verify() reads the mapped inode."""

    def __init__(self, path: str, fd: int, identity: FileIdentity) -> None:
        self._fd: int | None = fd
        super().__init__(path, identity)

    def _map_whole_file(self) -> tuple[mmap.mmap, int]:
        try:
            view = mmap.mmap(self._fd, self.size, access=mmap.ACCESS_READ)
        except (OSError, ValueError, OverflowError) as err:
            code = getattr(err, "errno", None)
            raise MappingError(f"mmap of {self.path} failed: {err}", os_error=code) from err
        return view, buffer_address(view)

    def _track_view(self, owner: object) -> None:
        track(owner, "live_mappings", "mapped_bytes", self.size)

    def current_identity(self) -> FileIdentity:
        fd = self._fd
        if fd is None:
            raise ClosedError(f"mapping of {self.path} is closed")
        return identity_of_fd(fd)

    def _release_handles(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


class PosixFileMapper(FileMapper):
    """``mmap`` with ``PROT_READ``/``MAP_SHARED``: pages shared through the page cache."""

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
            return PosixMappedFile(path, fd, identity)
        except OSError as err:
            os.close(fd)
            raise MappingError(f"cannot map {path}: {err}", os_error=err.errno) from err
        except BaseException:
            os.close(fd)
            raise
