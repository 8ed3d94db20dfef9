"""Windows file mapper over kernel32 (ctypes): upstream's `WindowsFileMapper`, with its two
known weak spots fixed (paths are real wide strings, CreateFileMapping failure is NULL).

Sequence: CreateFileW (GENERIC_READ, FILE_SHARE_READ: while we hold the file, nobody can open
it for writing, truncate, rename or delete it), CreateFileMappingW (PAGE_READONLY, whole file),
MapViewOfFile (FILE_MAP_READ) per view. Every kernel32 function gets its ``argtypes`` and
``restype`` declared: handles and pointers are 64 bits, and ctypes' default ``int`` would cut
them to 32. The last error is read right after the failing call, before any cleanup call can
overwrite it. OS errors become domain errors here and nowhere else.

Lifetime: each view is a ctypes byte array over the view's address; a finalizer on it calls
UnmapViewOfFile when the last user (numpy array, memoryview) is gone. The file and mapping
handles (`_Handles`) are closed once close() was called AND every view is unmapped.

Long paths: a path whose absolute form has MAX_PATH (260) characters or more is passed as
``\\\\?\\C:\\...`` (``\\\\?\\UNC\\server\\share\\...`` for UNC); shorter paths are passed exactly
as given, so they resolve the way ``os.stat`` resolved them in `check_file`.
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys
import threading
import weakref
from collections.abc import Callable

from ._base import FileMapper, MappedFile
from ._common import (
    ClosedError,
    FileAccessError,
    FileCheckError,
    FileIdentity,
    FileMissingError,
    MappingError,
    PlatformUnavailableError,
    check_file,
)
from ._faults import FaultCursor
from ._stats import track
from ._winapi import (  # noqa: F401 - re-exported: tests and tools read them from here
    ERROR_ACCESS_DENIED,
    ERROR_FILE_INVALID,
    ERROR_FILE_NOT_FOUND,
    ERROR_PATH_NOT_FOUND,
    ERROR_SHARING_VIOLATION,
    FILE_MAP_READ,
    FILE_SHARE_READ,
    GENERIC_READ,
    MAX_PATH,
    OPEN_EXISTING,
    PAGE_READONLY,
    SIGNATURES,
    SYSTEM_INFO,
    Kernel32,
    Win32Error,
    filetime_to_unix_ns,
    split_u64,
    win32_path,
)


def _open_error(err: Win32Error, path: str) -> FileCheckError:
    if err.code in (ERROR_FILE_NOT_FOUND, ERROR_PATH_NOT_FOUND):
        return FileMissingError(path, f"no such file ({err})")
    if err.code == ERROR_SHARING_VIOLATION:
        return FileAccessError(path, f"open for writing by another process ({err})")
    if err.code == ERROR_ACCESS_DENIED:
        return FileAccessError(path, f"permission denied ({err})")
    return FileAccessError(path, f"cannot open ({err})")


def _mapping_error(err: Win32Error, path: str) -> MappingError:
    return MappingError(f"cannot map {path}: {err}", os_error=err.code)


class _Handles:
    """File + mapping handles, closed when the last holder lets go: the mapped file (until
    close() or garbage collection) and each live view hold one reference. The file handle
    must outlive every view: its share mode is what keeps writers out."""

    def __init__(self, api: Kernel32, file: int, mapping: int) -> None:
        self.api = api
        self.file = file
        self.mapping = mapping
        self._refs = 1
        self._lock = threading.Lock()  # held only over int updates: no GC can run inside

    def retain(self) -> bool:
        """One more holder; False if the handles are already closed."""
        with self._lock:
            if self._refs == 0:
                return False
            self._refs += 1
            return True

    def release(self) -> None:
        with self._lock:
            self._refs -= 1
            last = self._refs == 0
        if last:  # kernel32 calls outside the lock: finalizers may run here
            self.api.close(self.mapping)
            self.api.close(self.file)


def _unmap_view(api: Kernel32, address: int, handles: _Handles) -> None:
    try:
        api.unmap(address)  # a failure here has nobody to report to; the handles still close
    finally:
        handles.release()


def _finalizer(obj: object, func: Callable, *args: object) -> weakref.finalize:
    """A finalizer that does not run at interpreter exit: unmapping memory that a daemon
    thread or a late destructor may still read would crash; the OS unmaps at exit anyway."""
    fin = weakref.finalize(obj, func, *args)
    fin.atexit = False
    return fin


@functools.lru_cache(maxsize=64)
def _view_type(length: int) -> type:
    """A ``c_ubyte * length`` subclass that, unlike plain ctypes arrays, can be weak-referenced
    (the unmap finalizer needs it) and hashed by identity (ctypes arrays refuse hash())."""
    return type("MappedView", (ctypes.c_ubyte * length,), {"__hash__": object.__hash__})


class WindowsMappedFile(MappedFile):
    """A read-only mapping of a whole file; handles stay open while anything is mapped."""

    def __init__(self, path: str, api: Kernel32, handles: _Handles, identity: FileIdentity,
                 granularity: int) -> None:
        self._api = api
        self._handles: _Handles | None = handles
        self._drop_handles = _finalizer(self, handles.release)  # also if never closed
        try:
            super().__init__(path, identity.size, identity, granularity)
        except BaseException:
            self._release_handles()
            raise

    def _map_view(self, aligned_offset: int, length: int) -> object:
        handles = self._handles
        if handles is None or not handles.retain():
            raise MappingError(f"cannot map {self.path}: file is closed")
        try:
            address = self._api.map_view(handles.mapping, aligned_offset, length)
        except BaseException as err:  # the last error is already read: now the cleanup
            handles.release()
            if isinstance(err, Win32Error):
                raise _mapping_error(err, self.path) from err
            raise
        try:
            view = _view_type(length).from_address(address)
        except BaseException:
            _unmap_view(self._api, address, handles)
            raise
        # Unmaps even if the view is dropped before it is tracked; tracking calls it first.
        view._unmap = _finalizer(view, _unmap_view, self._api, address, handles)
        return view

    def _track(self, owner: object, count_key: str, bytes_key: str, nbytes: int) -> None:
        track(owner, count_key, bytes_key, nbytes, on_release=owner._unmap).atexit = False

    def _track_whole_view(self, owner: object) -> None:
        self._track(owner, "live_mappings", "mapped_bytes", self.size)

    def _track_region_view(self, owner: object, length: int) -> None:
        self._track(owner, "live_views", "view_bytes", length)

    def current_identity(self) -> FileIdentity:
        handles = self._handles
        if handles is None or not handles.retain():
            raise ClosedError(f"mapping of {self.path} is closed")
        try:
            return self._api.identity(handles.file)
        except Win32Error as err:
            raise _mapping_error(err, self.path) from err
        finally:
            handles.release()

    def _release_handles(self) -> None:
        self._handles = None
        self._drop_handles()  # runs once; the handles close when the last view is unmapped


class WindowsFileMapper(FileMapper):
    """CreateFileW + CreateFileMappingW + MapViewOfFile: pages come from the system cache,
    shared by every process that maps the same file.

    ``kernel32`` and ``get_last_error`` are for tests (a fake kernel32 on any OS); by default
    ``ctypes.WinDLL("kernel32", use_last_error=True)`` and ``ctypes.get_last_error``."""

    name = "windows-kernel32"

    def __init__(
        self, kernel32: object | None = None, get_last_error: Callable[[], int] | None = None
    ) -> None:
        if kernel32 is None:
            if sys.platform != "win32":
                raise PlatformUnavailableError("kernel32 file mapping is only available on Windows")
            kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)
        if get_last_error is None:
            get_last_error = getattr(ctypes, "get_last_error", None)
            if get_last_error is None:
                raise TypeError("get_last_error is required with an injected kernel32 off Windows")
        self._api = Kernel32(kernel32, get_last_error)
        granularity = self._api.allocation_granularity()
        if granularity <= 0 or granularity & (granularity - 1):
            raise PlatformUnavailableError(f"GetSystemInfo: bad allocation granularity {granularity}")
        self.allocation_granularity = granularity

    def _open(self, path: str) -> int:
        """CreateFileW on the wide (and, when long, ``\\\\?\\``) path; FileCheckError on failure."""
        try:
            return self._api.open_file(win32_path(os.fsdecode(path)))
        except Win32Error as err:
            raise _open_error(err, path) from err

    def identity_of_path(self, path: str) -> FileIdentity:
        """Through the same handle API as a mapping: ``os.stat`` on Python 3.12+ reports a
        64-bit volume serial where GetFileInformationByHandle gives 32 bits, so mixing the two
        would make every load look like a changed file."""
        api = self._api
        handle = self._open(path)
        try:
            return api.identity(handle)
        except Win32Error as err:
            raise _mapping_error(err, path) from err
        finally:
            api.close(handle)

    def map_file(self, path: str, faults: FaultCursor | None = None) -> WindowsMappedFile:
        if faults is not None and faults.platform_unavailable:
            raise PlatformUnavailableError("file mapping unavailable on this platform (injected)")
        check_file(win32_path(os.fsdecode(path)) if os.name == "nt" else path)  # long paths: \\?\ form
        api = self._api
        file = self._open(path)
        try:
            if faults is not None:
                faults.before_map()
            identity = api.identity(file)
            if identity.size == 0:  # emptied between check and open
                raise Win32Error("GetFileSizeEx", ERROR_FILE_INVALID, "file became empty")
            mapping = api.create_mapping(file)
        except Win32Error as err:
            api.close(file)
            raise _mapping_error(err, path) from err
        except OSError as err:  # injected by the FaultCursor
            api.close(file)
            raise MappingError(f"cannot map {path}: {err}", os_error=err.errno) from err
        except BaseException:
            api.close(file)
            raise
        handles = _Handles(api, file, mapping)  # owns both handles from here on
        return WindowsMappedFile(path, api, handles, identity, self.allocation_granularity)
