"""Windows file mapper: upstream's `WindowsFileMapper` (one whole-file view, handles closed) with two fixes."""

from __future__ import annotations

import ctypes
import functools
import os
import sys
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
    ERROR_USER_MAPPED_FILE,
    FILE_ID_INFO,
    FILE_ID_INFO_CLASS,
    FILE_MAP_READ,
    FILE_SHARE_ALL,
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
    load,
    split_u64,
    utf16_units,
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


def _unmap_view(api: Kernel32, address: int) -> None:
    api.unmap(address)  # a failure here has nobody to report to


def _finalizer(obj: object, func: Callable, *args: object) -> weakref.finalize:
    """A finalizer that does not run at interpreter exit (the OS unmaps then anyway)."""
    fin = weakref.finalize(obj, func, *args)
    fin.atexit = False
    return fin


@functools.lru_cache(maxsize=64)
def _view_type(length: int) -> type:
    """A ``c_ubyte * length`` subclass that can be weak-referenced and hashed by identity."""
    return type("MappedView", (ctypes.c_ubyte * length,), {"__hash__": object.__hash__})


class WindowsMappedFile(MappedFile):
    """One read-only view of a whole file; no handle is kept once the view exists."""

    def __init__(
        self, path: str, api: Kernel32, mapping: int, identity: FileIdentity, mapper: WindowsFileMapper
    ) -> None:
        self._api = api
        self._mapping_handle: int | None = mapping  # used by _map_whole_file, closed by map_file
        self._mapper = mapper
        super().__init__(path, identity)
        self._mapping_handle = None

    def _map_whole_file(self) -> tuple[object, int]:
        try:
            address = self._api.map_view(self._mapping_handle)  # offset 0, length 0: all of it
        except Win32Error as err:
            raise _mapping_error(err, self.path) from err
        try:
            view = _view_type(self.size).from_address(address)
        except BaseException:
            _unmap_view(self._api, address)
            raise
        # Unmaps even if the view is dropped before it is tracked; tracking calls it first.
        view._unmap = _finalizer(view, _unmap_view, self._api, address)
        return view, address

    def _track_view(self, owner: object) -> None:
        track(owner, "live_mappings", "mapped_bytes", self.size, on_release=owner._unmap).atexit = False

    def current_identity(self) -> FileIdentity:
        if self.closed:
            raise ClosedError(f"mapping of {self.path} is closed")
        return self._mapper.identity_of_path(self.path)  # no handle is kept: through the path

    def _release_handles(self) -> None:
        return None  # closed right after mapping, as upstream


class WindowsFileMapper(FileMapper):
    """CreateFileW + CreateFileMappingW + MapViewOfFile, handles closed (``kernel32`` is injectable for tests)."""

    name = "windows-kernel32"

    def __init__(self, kernel32: object | None = None, get_last_error: Callable[[], int] | None = None) -> None:
        if kernel32 is None:
            if sys.platform != "win32":
                raise PlatformUnavailableError("kernel32 file mapping is only available on Windows")
            kernel32 = load("kernel32")
        if get_last_error is None:
            get_last_error = getattr(ctypes, "get_last_error", None)
            if get_last_error is None:
                raise TypeError("get_last_error is required with an injected kernel32 off Windows")
        self._api = Kernel32(kernel32, get_last_error)
        granularity = self._api.allocation_granularity()
        if granularity <= 0 or granularity & (granularity - 1):
            raise PlatformUnavailableError(f"GetSystemInfo: bad allocation granularity {granularity}")
        self.allocation_granularity = granularity

    def _open(self, path: str, share: int = FILE_SHARE_READ) -> int:
        """CreateFileW on the wide (and, when long, ``\\\\?\\``) path; FileCheckError on failure."""
        try:
            return self._api.open_file(win32_path(os.fsdecode(path)), share)
        except Win32Error as err:
            raise _open_error(err, path) from err

    def identity_of_path(self, path: str) -> FileIdentity:
        """Through the same handle API as a mapping, opened with full sharing."""
        api = self._api
        handle = self._open(path, FILE_SHARE_ALL)
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
        mapping = None
        try:
            if faults is not None:
                faults.before_map()
            identity = api.identity(file)
            if identity.size == 0:  # emptied between check and open
                raise Win32Error("GetFileSizeEx", ERROR_FILE_INVALID, "file became empty")
            mapping = api.create_mapping(file)
            return WindowsMappedFile(path, api, mapping, identity, self)
        except Win32Error as err:  # the last error is already read: now the cleanup
            raise _mapping_error(err, path) from err
        except OSError as err:  # injected by the FaultCursor
            raise MappingError(f"cannot map {path}: {err}", os_error=err.errno) from err
        finally:  # as upstream: the view (if any) keeps the mapping object alive
            if mapping is not None:
                api.close(mapping)
            api.close(file)
